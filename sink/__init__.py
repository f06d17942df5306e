"""The foreachBatch sink: the hand-over from ingest taken in (sink.batch; its form and how it crosses
Spark: sink.handover), one driver-side writer per store and the exactly-once protocol, the
dead-letter file, the Spark checkpoint's rewind. Imports store's public face only; nothing of ingest.

The names below load on first use: a read task imports sink.handover (the batch's form) in every cold
Python worker and planner, and has no use for the writer, which brings the store's open and commit."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:    # what a type checker sees of the names below
    from sink.deadletter import DeadLetterLog, read_dead_letters  # noqa: F401
    from sink.state import SinkState, parse_tp_key, tp_key  # noqa: F401
    from sink.writer import BatchStats, CommitLogWriter, kafka_next_offsets  # noqa: F401

_HOMES = {"DeadLetterLog": "sink.deadletter", "read_dead_letters": "sink.deadletter",
          "SinkState": "sink.state", "parse_tp_key": "sink.state", "tp_key": "sink.state",
          "BatchStats": "sink.writer", "CommitLogWriter": "sink.writer", "kafka_next_offsets": "sink.writer"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sink' has no attribute {name!r}")
    return getattr(import_module(home), name)
