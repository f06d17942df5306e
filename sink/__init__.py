"""The foreachBatch sink: the hand-over from ingest taken in (sink.batch; its form and how it crosses
Spark: sink.handover), one driver-side writer per store and the exactly-once protocol, the
dead-letter file, the Spark checkpoint's rewind. Imports store's public face only; nothing of ingest."""

from sink.deadletter import DeadLetterLog, read_dead_letters
from sink.state import SinkState, parse_tp_key, tp_key
from sink.writer import BatchStats, CommitLogWriter, kafka_next_offsets

__all__ = ["BatchStats", "CommitLogWriter", "DeadLetterLog", "SinkState", "kafka_next_offsets",
           "parse_tp_key", "read_dead_letters", "tp_key"]
