"""``commitlog verify``: check a store (or commit-log directory, or segment file) end to end.

Checked: segment names, sizes and contiguity; every record (magic, CRC, computed length,
PHYSICALOFFSET) with the scan's fast path; every BLANK (it must close its segment exactly);
queue-offset continuity per queue; every consume-queue unit against the record it points to
(offset, size, tagsCode) and units pointing past the data; the commit point and checkpoint
against the data. Each problem carries the global offset where it is and a kind.

The valid records past a store's commit point (store.read.past_commit: another writer's appends,
such as a RocketMQ broker's, or an unfinished batch) are checked too (queue offsets, units,
index items pointing at them) and reported as information, not as problems: a unit or an index
item pointing at one is in order, one pointing past them is not.
"""

from __future__ import annotations

import copy
import ctypes
import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TextIO

from store.format.codec import CodecConfig
from store.format.constants import CHECKPOINT_FILE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from store.log.checkpoint import checkpoint_damage
from store.read.past_commit import PastCommit, past_commit
from store.read.view import StoreView
from store.tools.progress import Progress
from store.tools.verify_behind import CheckedSegment
from store.tools.verify_index import index_problems
from store.tools.queues import Problem, QueueSpan, QueueUnits, dangling_units, join_spans
from store.tools.verify_segment import SegmentResult, SegmentTask, check_piece, join_pieces, plan_pieces, \
    verify_segment

# problems that do not end the valid data (RocketMQ's recovery reads on past them)
_NOT_RECORD_ERRORS = ("blank", "segmentNotClosed", "queueOffsetGap", "consumeQueueUnit", "consumeQueueMissing",
                      "consumeQueueDangling")
PARALLEL_MIN_BYTES = 256 << 20     # below this, starting processes costs more than it saves
PIECE_BYTES = 128 << 20            # a big segment is checked in pieces of this size, side by side
MAX_JOBS = 4
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3      # glibc's mallopt parameters


@dataclass
class VerifyReport:
    path: str
    kind: str
    segments: int = 0
    bytes: int = 0
    messages: int = 0
    message_bytes: int = 0
    blanks: int = 0
    units_checked: int = 0
    index_items_checked: int = 0
    queues: int = 0
    data_end: int = 0
    committed_offset: int | None = None
    past_commit_messages: int = 0           # valid records past the commit point (not problems)
    past_commit_bytes: int = 0
    past_commit_topics: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)      # information, not problems
    elapsed_s: float = 0.0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        d["mbPerS"] = round(self.mb_per_s, 1)
        d["problemKinds"] = dict(Counter(p.kind for p in self.problems))
        return d


def _layout_problems(src: StoreView) -> tuple[list[Problem], int]:
    """Segment names, sizes, contiguity. Returns the problems and the segment size used."""
    problems = [Problem(p.offset, p.kind, p.detail) for p in src.layout_problems()]
    return problems, src.segment_size


def _with_loose_base(src: StoreView) -> StoreView:
    """A loose record file (no 20-digit name, no --base) is taken to start where its first
    record says it is (its PHYSICALOFFSET), so its offsets can be checked."""
    if src.kind != "segment" or src.segments[0].check_physical_offset:
        return src
    seg = src.segments[0]
    with open(seg.path, "rb") as f:
        head = f.read(36)
    base = 0
    if len(head) == 36 and int.from_bytes(head[4:8], "big") in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        base = max(int.from_bytes(head[28:36], "big", signed=True), 0)
    return replace(src, segments=[replace(seg, base_offset=base)])


def default_jobs(src: StoreView) -> int:
    """Verified in parallel processes when there is enough to read: whole segments, and pieces
    of big segments (store.tools.verify_segment)."""
    if src.total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_JOBS))


def verify_source(src: StoreView, config: CodecConfig | None = None, progress: bool | None = None,
                  jobs: int | None = None, checked: Mapping[str, CheckedSegment] | None = None,
                  hand_back: bool = False) -> VerifyReport:
    """``checked``: segments whose records were checked already (store.tools.verify_behind), by file
    name; each is taken for a segment checked up to the same end, and its records are not read again.
    ``hand_back``: the index check hands each segment's pages back once done with it (for a store whose
    writer handed back its own, as replay's does)."""
    config = config or CodecConfig()
    t0 = time.perf_counter()
    report = VerifyReport(str(src.path), src.kind, segments=len(src.segments), committed_offset=src.committed_offset)
    src = _with_loose_base(src)
    tail = past_commit(src, config)
    problems, expected = _layout_problems(src)
    units = QueueUnits(src.root)
    tasks = []
    for i, seg in enumerate(src.segments):
        if src.committed_offset is not None and seg.base_offset >= src.committed_offset and i > 0:
            break    # nothing committed here (a writer's newest segment)
        end = src.segment_end(seg)
        tasks.append(SegmentTask(seg, end, expected, i == len(src.segments) - 1 or end < seg.size, units, config))
    reused = {i: copy.deepcopy(checked[t.seg.name].result) for i, t in enumerate(tasks)
              if checked and t.seg.name in checked and checked[t.seg.name].end == t.end}
    todo = [t for i, t in enumerate(tasks) if i not in reused]
    if jobs is None:
        # what is left to read decides: checked segments are not read again
        jobs = default_jobs(src) if sum(t.end for t in todo) >= PARALLEL_MIN_BYTES else 1
    jobs = max(1, jobs)
    pieces = plan_pieces(todo, PIECE_BYTES if jobs > 1 else 0, jobs)
    work = [(todo[p.task], p) for p in pieces]
    with Progress(src.total_bytes, "verify", enabled=progress) as bar, \
            _pool(jobs) as pool:
        results = pool.map(check_piece, work) if pool is not None else map(check_piece, work)
        # the workers are forked by now: a thread of this process may start
        with _IndexAside(src, tail, beside=pool is not None, hand_back=hand_back) as aside:
            joined = _in_order(len(tasks), reused, join_pieces(todo, pieces, results))
            spans, data_end, stopped_by_error = _merge(src, tasks, joined, expected, report, problems, bar)
            all_spans, valid_end = spans, data_end
            if tail is not None and tail.messages and data_end == tail.start and not stopped_by_error:
                all_spans, valid_end = _check_past_commit(tail, spans, units, expected, config, report, problems)
            index, report.index_items_checked = aside.result(valid_end)
    report.data_end = valid_end
    report.queues = len(all_spans)
    problems.extend(dangling_units(src, units, all_spans, valid_end))
    if not stopped_by_error:    # else the record error is the cause; the commit point is only a symptom
        problems.extend(_commit_problems(src, spans, data_end, valid_end,
                                         any(p.kind == "commitPoint" for p in problems)))
    problems.extend(index)
    problems.sort(key=lambda p: (p.offset, p.kind))
    report.problems = problems
    report.elapsed_s = time.perf_counter() - t0
    return report


def _in_order(count: int, reused: Mapping[int, SegmentResult], checked: Iterator[SegmentResult]
              ) -> Iterator[SegmentResult]:
    """The results of tasks 0..count-1: the reused ones where they are, the others from ``checked``."""
    for i in range(count):
        yield reused[i] if i in reused else next(checked)


def _check_past_commit(tail: PastCommit, spans: dict[tuple[str, int], QueueSpan], units: QueueUnits, expected: int,
                       config: CodecConfig, report: VerifyReport, problems: list[Problem]
                       ) -> tuple[dict[tuple[str, int], QueueSpan], int]:
    """The records past the commit point, stretch by stretch, as the committed ones (their queue
    offsets going on from the committed ones', their units); a record without its unit yet is in
    order (a broker writes its units behind its appends). Counted apart, told as a note. Returns
    the spans of every queue up to the end of those records, and that end."""
    joined = dict(spans)
    missing = 0
    for s in tail.stretches:
        res = verify_segment(SegmentTask(s.segment, s.end, expected, True, units, config), start=s.start)
        report.bytes += s.end - s.start
        report.units_checked += res.units_checked
        missing += sum(p.kind == "consumeQueueMissing" for p in res.problems)
        problems.extend(p for p in res.problems if p.kind != "consumeQueueMissing")
        join_spans(joined, res.queues, problems)
    report.past_commit_messages = tail.messages
    report.past_commit_bytes = tail.message_bytes
    report.past_commit_topics = {t: c.messages for t, c in sorted(tail.topics.items())}
    report.notes.append(tail.summary())
    if missing:
        report.notes.append(f"{missing} of the records past the commit point have no consume-queue unit yet")
    return joined, tail.end


class _IndexAside:
    """index_problems on a thread of the main process while the pieces run in theirs (``beside``:
    the main process only waits for them), with the commit point, or the end of the valid records
    past it, as the end of the valid data. Should the data be found ending before it, the check
    runs again with that end. Not beside worker processes, or with no commit point, it runs once
    the pieces are done."""

    def __init__(self, src: StoreView, tail: PastCommit | None, beside: bool, hand_back: bool = False) -> None:
        self._src = src
        self._hand_back = hand_back
        self._assumed = tail.end if tail is not None and tail.messages else src.committed_offset
        self._thread: ThreadPoolExecutor | None = None
        self._early: Future[tuple[list[Problem], int]] | None = None
        if beside and self._assumed is not None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="verify-index")
            self._early = self._thread.submit(index_problems, src, self._assumed, hand_back)

    def __enter__(self) -> _IndexAside:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)

    def result(self, data_end: int) -> tuple[list[Problem], int]:
        if self._early is not None:
            assert self._assumed is not None
            if data_end == self._assumed:
                return self._early.result()
            self._early.exception()        # done with before the check runs again
        return index_problems(self._src, data_end, self._hand_back)


@contextmanager
def _pool(jobs: int) -> Iterator[ProcessPoolExecutor | None]:
    if jobs <= 1:
        yield None
        return
    # fork is quick, but only safe with no other thread holding a lock (e.g. a store's flusher)
    method = "fork" if threading.active_count() == 1 else "spawn"
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method),
                             initializer=reuse_freed_memory) as pool:
        yield pool


def reuse_freed_memory() -> None:
    """For a process that only verifies: keep freed memory for the next allocation. Each window
    allocates and frees the same few MiB of numpy temporaries; by default glibc returns such
    blocks to the kernel on free and the next allocation takes fresh pages, a page fault
    each: in a profile, most of the workers' system time."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return                              # not glibc: nothing to tune
    mallopt(_M_MMAP_THRESHOLD, 256 << 20)
    mallopt(_M_TRIM_THRESHOLD, 512 << 20)
    mallopt(_M_TOP_PAD, 64 << 20)


def _merge(src: StoreView, tasks: list[SegmentTask], results: Iterable[SegmentResult], expected: int, report: VerifyReport,
           problems: list[Problem], bar: Progress) -> tuple[dict[tuple[str, int], QueueSpan], int, bool]:
    """Join the segments' results in order: queue continuity across segments, and where the
    valid data ends (the first error, the first hole, or the end)."""
    spans: dict[tuple[str, int], QueueSpan] = {}
    prev_broken, stopped, by_error = False, False, False
    prev_base = None
    data_end = src.segments[0].base_offset if src.segments else 0
    done = 0
    for task, res in zip(tasks, results):
        seg, end = task.seg, task.end
        contiguous = prev_base is None or seg.base_offset == prev_base + expected
        report.bytes += end
        report.messages += res.messages
        report.message_bytes += res.message_bytes
        report.blanks += res.blanks
        report.units_checked += res.units_checked
        problems.extend(res.problems)
        stopped = stopped or not contiguous
        if not stopped:
            errors = [p.offset for p in res.problems if p.kind not in _NOT_RECORD_ERRORS]
            if errors:
                data_end, stopped, by_error = min(errors), True, True
            else:
                data_end = res.data_end
                stopped = res.broken
        join_spans(spans, res.queues, problems, check=not prev_broken and contiguous)
        prev_broken = res.broken
        prev_base = seg.base_offset
        done += seg.size
        bar.update(done)
    return spans, data_end, by_error


def _commit_problems(src: StoreView, spans: dict[tuple[str, int], QueueSpan], data_end: int, valid_end: int,
                     cut_reported: bool) -> list[Problem]:
    """The commit point against the committed data (``spans``, up to ``data_end``); the
    checkpoint against all the valid data (up to ``valid_end``: a broker's checkpoint covers its
    records past the commit point)."""
    out: list[Problem] = []
    cp = src.commit_point
    if cp is not None:
        if cp.offset > data_end and not cut_reported:
            out.append(Problem(cp.offset, "commitPoint",
                               f"the commit point {cp.offset} is past the end of the valid data {data_end}"))
        for (topic, qid), nxt in sorted(cp.queue_offsets.items()):
            span = spans.get((topic, qid))
            have = span.last_qo + 1 if span else None
            if have is not None and have != nxt:
                out.append(Problem(span.last_offset, "commitPointQueueOffset",
                                   f"{topic}/{qid}: the commit point says next queue offset {nxt}, "
                                   f"the data {have}"))
    damage = checkpoint_damage(src.root / CHECKPOINT_FILE) if src.root is not None else None
    if damage is not None:
        out.append(Problem(0, "checkpoint", f"{damage}: its fields are lost (the next writer's open rebuilds it)"))
    ck = src.checkpoint
    if ck is not None and ck.confirm_phy_offset > valid_end:
        out.append(Problem(ck.confirm_phy_offset, "checkpoint",
                           f"checkpoint confirmPhyOffset {ck.confirm_phy_offset} is past the end of the "
                           f"valid data {valid_end}"))
    return out


def print_report(report: VerifyReport, out: TextIO, as_json: bool = False) -> None:
    if as_json:
        out.write(json.dumps(report.to_json(), ensure_ascii=False) + "\n")
        return
    status = "OK" if report.ok else f"{len(report.problems)} PROBLEM(S)"
    out.write(f"{report.path} ({report.kind}): {status}\n"
              f"  {report.segments} segments, {report.bytes:,} bytes read, {report.messages:,} messages "
              f"({report.message_bytes:,} bytes), {report.blanks} blanks, {report.queues} queues, "
              f"{report.units_checked:,} consume-queue units and {report.index_items_checked:,} index items "
              f"checked\n"
              f"  valid data ends at {report.data_end}"
              + (f", committed offset {report.committed_offset}" if report.committed_offset is not None else "")
              + f"; {report.elapsed_s:.2f} s, {report.mb_per_s:,.0f} MB/s\n")
    for note in report.notes:
        out.write(f"  note: {note}\n")
    for p in report.problems:
        out.write(f"  {p.offset:>20} {p.kind}: {p.detail}\n")
