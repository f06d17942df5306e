"""Kafka records to CommitLog records in the read tasks: the mapping rules, the general (pyarrow) path,
the one-pass C kernel, the ``kafka-rocketmq`` source that runs them, and the batch's collection on the
driver. Imports ingest.kafka, sink's hand-over (sink.handover) and store.format."""
