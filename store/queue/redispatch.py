"""Rebuilding consume-queue units from the commit log (recovery, and after deleting a queue)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from store.format.constants import (
    PROPERTY_DELAY,
    SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.format.properties import parse_delay_property
from store.queue.consume_queue import ConsumeQueueStore
from store.queue.units import check_topic_name

if TYPE_CHECKING:
    from store.format.codec import DecodedMessage


def redispatch(cq: ConsumeQueueStore, records: Iterable[tuple[int, "DecodedMessage"]],
               chunk: int = 4096) -> int:
    """Add the units the consume queues are missing for ``records`` ((physical offset, decoded
    message), in commit-log order); records of PREPARED/ROLLBACK type get no unit, units already
    present are skipped. Returns how many units were written."""
    from store.format.properties import tags_code

    have = cq.next_queue_offsets()
    names: list[str] = []
    index: dict[str, int] = {}
    cols: list[list[int]] = [[] for _ in range(7)]
    written = 0

    def flush_chunk() -> None:
        nonlocal written
        if not cols[0]:
            return
        ti, qi, qo, ph, sz, tg, dl = (np.asarray(c, dtype=np.int64) for c in cols)
        ts = np.asarray(cols_ts, dtype=np.int64)
        cq.dispatch(list(names), ti, qi, qo, ph, sz, tg, delay_levels=dl, store_timestamp=ts)
        written += len(ti)
        for c in cols:
            c.clear()
        cols_ts.clear()

    cols_ts: list[int] = []
    for phys, m in records:
        if (m.sys_flag & TRANSACTION_TYPE_MASK) in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            continue
        key = (m.topic, m.queue_id)
        nxt = have.get(key)
        if nxt is not None and m.queue_offset < nxt:
            continue
        have[key] = m.queue_offset + 1
        if m.topic not in index:
            check_topic_name(m.topic)
            index[m.topic] = len(names)
            names.append(m.topic)
        delay = parse_delay_property(m.properties.get(PROPERTY_DELAY)) if m.topic == SCHEDULE_TOPIC else 0
        for c, v in zip(cols, (index[m.topic], m.queue_id, m.queue_offset, phys, m.total_size,
                               tags_code(m.tags), delay)):
            c.append(v)
        cols_ts.append(m.store_timestamp)
        if len(cols[0]) >= chunk:
            flush_chunk()
    flush_chunk()
    return written
