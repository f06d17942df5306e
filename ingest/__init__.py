"""The streaming job: the Kafka source (kafka/), Kafka records to CommitLog records (encode/), the
replay of history (replay/), and at this level the job, its settings, the command line, the demo and
the embedded broker launcher. Imports sink, store's public face and store.format."""
