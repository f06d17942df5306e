"""The streaming job: the Kafka source (kafka/), Kafka records to CommitLog records (encode/), the
replay of history (replay/), the Spark source of a store read back (readback/), and at this level the
job, its settings and the command line; devtools/ holds what development runs and the job never does
(the demo, the embedded brokers). Imports sink, store's public face, store.format and store.scan."""
