"""The rows of ``replay --from-files`` with no Kafka position (ingest.replay.export_rows.Unplaced),
written as dead letters of their own, once however often the replay runs."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ingest.replay.export_rows import Unplaced
from store import DeadLetterReason


def unplaced_table(unplaced: list[Unplaced]) -> pa.Table:
    """The unplaced rows as dead rows of the hand-over (sink.handover.schema.ENCODED_SCHEMA)."""
    from sink.handover.schema import ENCODED_SCHEMA

    n = len(unplaced)
    cols: dict[str, Any] = {f.name: pa.nulls(n, f.type) for f in ENCODED_SCHEMA}
    cols.update({"kafka_topic": pa.array([u.topic for u in unplaced], pa.string()),
                 "kafka_partition": pa.array([u.partition for u in unplaced], pa.int32()),
                 "kafka_offset": pa.array([u.offset for u in unplaced], pa.int64()),
                 "dead_reason": pa.array([u.reason for u in unplaced], pa.string()),
                 "dead_code": pa.repeat(pa.scalar(DeadLetterReason.FILE_ROW_INVALID, pa.string()), n),
                 "raw_value": pa.array([u.raw for u in unplaced], pa.binary())})
    return pa.table([cols[f.name] for f in ENCODED_SCHEMA], schema=ENCODED_SCHEMA)


def write_unplaced(writer: Any, unplaced: list[Unplaced]) -> tuple[int, int]:
    """Write the rows no partition range holds as one batch of dead letters, before the ranges.
    They move no Kafka offset (sink.writer.kafka_next_offsets), so what makes them exactly once is
    their reason, which names the file and line: one already in the store's dead letters (an earlier
    run of the same replay) is not written again. Returns (written, already held)."""
    from sink import read_dead_letters

    if not unplaced:
        return 0, 0
    known = {d.get("reason") for d in read_dead_letters(writer.root)}
    todo = [u for u in unplaced if u.reason not in known]
    if todo:
        writer.write_batch(writer.state.batch_id + 1, None, unplaced_table(todo))
    return len(todo), len(unplaced) - len(todo)


def selected(unplaced: list[Unplaced], topics: tuple[str, ...] | None, pattern: str | None) -> list[Unplaced]:
    """The unplaced rows of the topics asked for; a row whose topic is unknown is always kept."""
    import re

    if not topics and not pattern:
        return unplaced
    return [u for u in unplaced if u.topic is None
            or (u.topic in topics if topics else re.fullmatch(pattern or "", u.topic) is not None)]
