"""The consume queues (RocketMQ's ConsumeQueue): 20-byte units per (topic, queueId), their files,
reads, dispatch from the commit log, redispatch after recovery, and the grouping of a batch by queue.
Imports store.format and store.errors only."""
