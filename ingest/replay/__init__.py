"""``commitlog replay``: a bounded, resumable replay of history (a Kafka range or exported files) into a
store, through the same sink as the job. Imports ingest's job pieces, sink and store's public face."""
