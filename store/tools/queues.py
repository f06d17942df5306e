"""verify's consume-queue side: queue-offset continuity, each record's unit (offset, size,
tagsCode), and units with no record of their queue (dangling)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from store.format.constants import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from store.read.view import StoreView
from store.scan.fields import RecordFields, record_fields, tags_codes


@dataclass
class Problem:
    offset: int
    kind: str
    detail: str


@dataclass
class QueueSpan:
    first_qo: int
    first_offset: int
    last_qo: int
    last_offset: int


class QueueUnits:
    """Consume-queue units read straight from the files (no per-call rescan)."""

    def __init__(self, root: Path | None) -> None:
        self.dir = root / "consumequeue" if root is not None else None
        self.units_per_file: int | None = None

    @property
    def present(self) -> bool:
        return self.dir is not None and self.dir.is_dir()

    def read(self, topic: str, queue_id: int, first: int, count: int) -> np.ndarray:
        from store.queue.units import UNIT_DTYPE, file_name, read_units

        out = np.zeros(count, dtype=UNIT_DTYPE)
        qdir = self.dir / topic / str(queue_id)
        q, done = first, 0
        while done < count:
            upf = self._upf(qdir)
            if upf is None:
                break
            fstart = q - q % upf
            n = min(count - done, fstart + upf - q)
            try:
                got = read_units(qdir / file_name(fstart * 20), q - fstart, n)
                out[done:done + len(got)] = got
            except FileNotFoundError:
                pass
            done += n
            q += n
        return out

    def _upf(self, qdir: Path) -> int | None:
        if self.units_per_file is None:
            from store.queue.units import file_name, list_unit_files

            files = list_unit_files(qdir)
            if not files:
                return None
            self.units_per_file = (qdir / file_name(files[0])).stat().st_size // 20 or None
        return self.units_per_file


@dataclass
class QueueCheck:
    problems: list[Problem] = field(default_factory=list)
    spans: dict[tuple[str, int], QueueSpan] = field(default_factory=dict)
    units_checked: int = 0


def join_spans(spans: dict[tuple[str, int], QueueSpan], later: dict[tuple[str, int], QueueSpan],
               problems: list[Problem], check: bool = True) -> None:
    """Extend ``spans`` by the spans of the records that follow them (``later``); with
    ``check``, a queue that does not go on at the next queue offset is a queueOffsetGap."""
    for key, span in later.items():
        before = spans.get(key)
        if before is None:
            spans[key] = span
            continue
        if check and span.first_qo != before.last_qo + 1:
            problems.append(Problem(span.first_offset, "queueOffsetGap",
                                    f"{key[0]}/{key[1]}: queue offset {span.first_qo} follows "
                                    f"{before.last_qo} (at {before.last_offset})"))
        spans[key] = QueueSpan(before.first_qo, before.first_offset, span.last_qo, span.last_offset)


QUEUE_CHECK_ROWS = 1 << 17      # records checked at a time: the temporaries stay a few MiB


def check_queues(arr: np.ndarray, base_offset: int, starts: np.ndarray, sizes: np.ndarray,
                 units: QueueUnits, fields: RecordFields | None = None) -> QueueCheck:
    """Queue-offset continuity of the records of one segment (positions ``starts``), and each
    record's consume-queue unit: offset, size and tagsCode. ``fields``: the records' fields
    when the caller has them already (else they are read here)."""
    res = QueueCheck()
    for a in range(0, len(starts), QUEUE_CHECK_ROWS):
        b = a + QUEUE_CHECK_ROWS
        f = fields.rows(a, b) if fields is not None else record_fields(arr, starts[a:b], sizes[a:b])
        part = _check_queues(arr, base_offset, f, units)
        res.problems.extend(part.problems)
        res.units_checked += part.units_checked
        join_spans(res.spans, part.spans, res.problems)
    return res


def _check_queues(arr: np.ndarray, base_offset: int, f: RecordFields, units: QueueUnits) -> QueueCheck:
    res = QueueCheck()
    tx = f.sys_flag & TRANSACTION_TYPE_MASK
    eligible = (tx != TRANSACTION_PREPARED_TYPE) & (tx != TRANSACTION_ROLLBACK_TYPE)
    idx_all = np.flatnonzero(eligible)
    if not len(idx_all):
        return res
    tags = tags_codes(arr, f) if units.present else None
    key = f.topic_id[idx_all] * (1 << 32) + (f.queue_id[idx_all] & 0xFFFFFFFF)
    order = idx_all[np.argsort(key, kind="stable")]
    skey = f.topic_id[order] * (1 << 32) + (f.queue_id[order] & 0xFFFFFFFF)
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(skey)) + 1, [len(order)]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        g = order[a:b]
        topic, qid = f.topics[int(f.topic_id[g[0]])], int(f.queue_id[g[0]])
        qo = f.queue_offset[g]
        offs = f.starts[g] + base_offset
        jumps = np.flatnonzero(np.diff(qo) != 1)
        for j in jumps.tolist():
            res.problems.append(Problem(int(offs[j + 1]), "queueOffsetGap",
                                        f"{topic}/{qid}: queue offset {int(qo[j + 1])} follows {int(qo[j])}"))
        res.spans[(topic, qid)] = QueueSpan(int(qo[0]), int(offs[0]), int(qo[-1]), int(offs[-1]))
        if tags is None or len(jumps):
            continue
        u = units.read(topic, qid, int(qo[0]), len(g))
        res.units_checked += len(g)
        sz = f.sizes[g]
        missing = u["size"] <= 0
        wrong = ~missing & ((u["phys"] != offs) | (u["size"] != sz) | (u["tags"] != tags[g]))
        for i in np.flatnonzero(missing).tolist():
            res.problems.append(Problem(int(offs[i]), "consumeQueueMissing",
                                        f"{topic}/{qid}: no consume-queue unit for queue offset {int(qo[i])}"))
        for i in np.flatnonzero(wrong).tolist():
            res.problems.append(Problem(
                int(offs[i]), "consumeQueueUnit",
                f"{topic}/{qid} unit {int(qo[i])} is ({int(u['phys'][i])}, {int(u['size'][i])}, "
                f"{int(u['tags'][i])}); the record is ({int(offs[i])}, {int(sz[i])}, {int(tags[g][i])})"))
    return res


def dangling_units(src: StoreView, units: QueueUnits, spans: dict[tuple[str, int], QueueSpan],
                    data_end: int) -> list[Problem]:
    """Units with no record of their queue in the log (before its first or after its last
    record) that point into the verified data."""
    out: list[Problem] = []
    if not units.present:
        return out
    cq = src.consume_queues()
    if cq is None:
        return out
    for topic, qids in cq.topics().items():
        for qid in qids:
            lo, hi = cq.queue_range(topic, qid)
            span = spans.get((topic, qid))
            ranges = [(span.last_qo + 1, hi), (lo, span.first_qo)] if span else [(lo, hi)]
            for start, stop in ranges:
                if stop > start:
                    out.extend(_dangling(units, topic, qid, start, stop, data_end, src))
    return out


def _dangling(units: QueueUnits, topic: str, qid: int, start: int, stop: int, data_end: int,
              src: StoreView) -> list[Problem]:
    """Units start..stop of a queue have no record of theirs in the log."""
    out: list[Problem] = []
    extra = units.read(topic, qid, start, stop - start)
    for k, (phys, size, _) in enumerate(extra.tolist()):
        # past the valid data a unit is only ahead of the log (a writer's, or a crash's dirty
        # tail that recovery truncates): report those pointing into the checked data
        if src.segments and src.segments[0].base_offset <= phys < data_end and size > 0:
            out.append(Problem(phys, "consumeQueueDangling",
                               f"{topic}/{qid} unit {start + k} points at {phys} (size {size}), but no record "
                               f"of this queue has queue offset {start + k}"))
    return out
