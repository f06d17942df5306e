"""The checks a batch of records encoded elsewhere passes before the store takes its word for them.

The append (store.log.commitlog) copies each record as it is and files it under the topic, queue
and sysFlag its columns name: it checks that the records fit and lie back to back, not what is in
them. A batch that crossed a boundary it should not trust (a file another process could have
touched, sink.handover.spool) is checked here first, as recovery checks a segment (store.scan.record_check):
TOTALSIZE equals the record's length, the magic code, every field length adds up, BODYCRC matches
the body; and the record's own TOPIC, QUEUEID and SYSFLAG are the ones its columns say. In C
(_record_check.c, built by setup.py) every check of a record is made in one pass over its bytes,
outside the GIL; tests/oracles/encoded_check.py is the numpy way the tests hold it to.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from store.errors import InvalidMessageError
from store.format.batch_columns import binary_parts, int_column
from store.format.codec import CodecConfig
from store.format.constants import MIN_RECORD_LENGTH
from store.format.layout import be_ints
from store.scan.fields import ScanColumns, rows_at
from store.scan.record_check import check_record, first_bad

_ROWS_WIDTH = 256       # topics up to this long are compared as rows of a byte matrix


def check_encoded(table: pa.Table | pa.RecordBatch) -> None:
    """Raise InvalidMessageError naming the first row whose ``record`` is not a well-formed,
    not yet appended commit-log record, or whose ``topic``, ``queue_id`` or ``sys_flag`` column
    differs from what its record says. Rows without a record (dead letters) have nothing to check."""
    batches = table.to_batches() if isinstance(table, pa.Table) else [table]
    first_row = 0
    for batch in batches:
        _check_batch(batch, first_row)
        first_row += batch.num_rows


def _check_batch(batch: pa.RecordBatch, first_row: int) -> None:
    records = batch.column("record")
    rows = np.arange(len(records)) if records.null_count == 0 else \
        np.flatnonzero(records.is_valid().to_numpy(zero_copy_only=False))
    if not len(rows):
        return
    offs, values = binary_parts(records)
    starts, sizes = offs[:-1][rows], np.diff(offs)[rows]

    def fail(i: int, detail: str) -> InvalidMessageError:
        return InvalidMessageError(f"row {first_row + int(rows[i])} (a record of {int(sizes[i])} bytes): {detail}")

    short = np.flatnonzero(sizes < MIN_RECORD_LENGTH)
    if len(short):
        raise fail(int(short[0]), f"shorter than any record ({MIN_RECORD_LENGTH} bytes)")
    first, cols = _records(values, starts, sizes)
    # the columns against the records, over the records that are well formed
    queue_id = int_column(batch.column("queue_id"), np.int64)[rows[:first]]
    sys_flag = int_column(batch.column("sys_flag"), np.int64)[rows[:first]]
    differ = np.flatnonzero((cols.queue_id[:first] != queue_id) | (cols.sys_flag[:first] != sys_flag))
    topic_at = _first_topic_mismatch(values, cols.topic_pos[:first], cols.topic_len[:first],
                                     batch.column("topic").take(pa.array(rows[:first])))
    worst = min([first, topic_at, *(int(d) for d in differ[:1])])
    if worst == len(rows):
        return
    if worst < first:
        i = worst
        said = {"topic": batch.column("topic")[int(rows[i])].as_py(), "queue_id": int(queue_id[i]),
                "sys_flag": int(sys_flag[i])}
        holds = {"topic": _text(values, int(cols.topic_pos[i]), int(cols.topic_len[i])),
                 "queue_id": int(cols.queue_id[i]), "sys_flag": int(cols.sys_flag[i])}
        name = next(k for k in said if said[k] != holds[k])
        raise fail(i, f"its {name} column says {said[name]!r} but the record holds {holds[name]!r}")
    pos = int(starts[first])
    total = int(be_ints(values, starts[first:first + 1], 4)[0])
    if total != int(sizes[first]):
        raise fail(first, f"TOTALSIZE {total} is not the record's length")
    check = check_record(memoryview(values), pos, pos + int(sizes[first]), -pos, CodecConfig())
    raise fail(first, check.detail or "not a record")


def _records(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> tuple[int, ScanColumns]:
    """(index of the first record that fails, or len(starts); the fields of those before it)."""
    return first_bad(values, memoryview(values), starts, sizes, 0, CodecConfig(), placed=False)


def _first_topic_mismatch(values: np.ndarray, pos: np.ndarray, length: np.ndarray, topics: pa.Array) -> int:
    """Index of the first record whose TOPIC bytes differ from ``topics`` (UTF-8), or len(pos):
    the lengths, then both sides' bytes as rows of one width, compared where they count."""
    t_offs, t_values = binary_parts(topics.cast(pa.binary()))
    bad = np.diff(t_offs) != length
    same = np.flatnonzero(~bad)
    width = int(length[same].max()) if len(same) else 0
    if width > _ROWS_WIDTH:        # very long topics: byte by byte, in one gather
        ends = np.cumsum(length[same])
        at = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(pos[same] - (ends - length[same]), length[same])
        col = np.repeat(t_offs[:-1][same] - (ends - length[same]), length[same]) + np.arange(int(ends[-1]))
        differ = np.flatnonzero(values[at] != t_values[col])
        if len(differ):
            bad[same[np.searchsorted(ends, differ, side="right")]] = True
    elif width:
        counts = np.arange(width) < length[same, None]
        bad[same] = ((rows_at(values, pos[same], width) != rows_at(t_values, t_offs[:-1][same], width))
                     & counts).any(axis=1)
    wrong = np.flatnonzero(bad)
    return int(wrong[0]) if len(wrong) else len(pos)


def _text(values: np.ndarray, pos: int, length: int) -> str:
    return values[pos:pos + length].tobytes().decode("utf-8", "replace")
