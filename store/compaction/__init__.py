"""The compaction log of RocketMQ 5's compaction topics (CompactionStore): per queue, a copy of the
topic's records and a sparse consume queue of them, which a 5.x broker serves the topic from and
compacts to the newest record of each KEYS. Derived from the commit log and the consume queue."""
