"""The commit log on disk, layered as RocketMQ's: Segment (MappedFile), SegmentQueue (MappedFileQueue),
CommitLog (the append), flush, the writer's lock, checkpoint, commit point and recovery. Imports
store.format, store.queue and store.errors; nothing above it (message_store, reader, tools)."""
