"""SIGKILL a writer at random moments (appending, flushing, committing, rolling segments, even
while it recovers) and check after each kill that reopening keeps every committed record intact
and nothing after the last commit.

The writer is a forked child (fast to start, so 60 kills fit in well under a minute). After
each commit returns it appends "<offset> <n>" to a side-channel file and fsyncs it, so the
parent knows a lower bound of what must have survived; the store may be one commit ahead
(killed between its commit and the side-channel write), never behind.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import random
import select
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig
from store.index.service import IndexService

pytestmark = pytest.mark.crash

SEG = 64 * 1024
KILLS = 60
PHASES = {0: "open", 1: "append", 2: "flush", 3: "commit", 4: "roll"}


def expected_message(i: int) -> Message:
    length = 40 + (i * 7919) % 900
    return Message(topic=f"C{i % 3}", queue_id=i % 4, body=(f"{i}:".encode() * (length // 2 + 1))[:length],
                   properties=f"KEYS\x01k{i}\x02")


def config(sync: bool) -> StoreConfig:
    return StoreConfig(segment_size=SEG, flush_mode="sync" if sync else "async",
                       flush_interval_ms=5, flush_least_pages=1, consume_queue_units=2000)


def writer(root: Path, side: Path, phase_file: Path, seed: int, ready_fd: int) -> None:
    """The child: append random-sized batches, sometimes flush, mostly commit; forever."""
    rng = random.Random(seed)
    with open(phase_file, "r+b") as f:
        phase = mmap.mmap(f.fileno(), 1)
    phase[0] = 0
    store = MessageStore.open(root, config(sync=seed % 2 == 0))
    os.write(ready_fd, b"r")
    appended = committed = store.last_commit.metadata.get("n", 0)
    side_fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while True:
        batch = [expected_message(i) for i in range(appended, appended + rng.randint(1, 30))]
        rolls = store.commit_log.queue.last().remaining < sum(len(m.body) + 120 for m in batch)
        phase[0] = 4 if rolls else 1
        store.append(batch)
        appended += len(batch)
        r = rng.random()
        if r < 0.2:
            phase[0] = 2
            store.flush()
        if r < 0.7:
            phase[0] = 3
            cp = store.commit(metadata={"n": appended})
            committed = appended
            os.write(side_fd, f"{cp.offset} {committed}\n".encode())
            os.fsync(side_fd)


class Checker:
    """Verifies the store after each kill; content is checked incrementally (new records one
    by one, older committed bytes by hash) so the run stays fast as the store grows."""

    def __init__(self, root: Path, side: Path) -> None:
        self.root, self.side = root, side
        self.offset, self.n, self.prefix_hash = 0, 0, hashlib.sha256().hexdigest()

    def side_channel(self) -> tuple[int, int]:
        # Only whole lines: a SIGKILL can land inside the write of the last one (a write that
        # crosses a page boundary is copied page by page, and a fatal signal stops it between).
        text = self.side.read_text() if self.side.exists() else ""
        lines = text.split("\n")[:-1]
        return tuple(map(int, lines[-1].split())) if lines else (0, 0)  # type: ignore[return-value]

    def committed_bytes_hash(self, end: int) -> str:
        h = hashlib.sha256()
        for base in range(0, end, SEG):
            with open(self.root / "commitlog" / str(base).zfill(20), "rb") as f:
                h.update(f.read(min(SEG, end - base)))
        return h.hexdigest()

    def check(self) -> None:
        side_offset, side_n = self.side_channel()
        with MessageStore.open(self.root, config(sync=False)) as s:
            n = s.last_commit.metadata.get("n", 0)
            assert s.max_offset == s.committed_offset == s.last_commit.offset
            assert s.committed_offset >= side_offset and n >= side_n, "a commit was lost"
            assert self.committed_bytes_hash(self.offset) == self.prefix_hash, "committed bytes changed"
            got = list(s.iter_messages(from_offset=self.offset))
            assert len(got) == n - self.n, f"{len(got)} records after {self.offset}, expected {n - self.n}"
            for j, (_off, m) in enumerate(got):
                want = expected_message(self.n + j)
                assert (m.topic, m.queue_id, m.body.tobytes()) == (want.topic, want.queue_id, want.body)
            counts = Counter((f"C{i % 3}", i % 4) for i in range(n))
            assert s.next_queue_offsets() == dict(counts)
            end = s.max_offset
            last = self.root / "commitlog" / str(end - end % SEG).zfill(20)
            tail = last.read_bytes()[end % SEG:]
            assert tail == bytes(len(tail)), "bytes after the commit point survived"
            later = [p.name for p in (self.root / "commitlog").iterdir() if p.name.isdigit() and int(p.name) > end]
            assert later == [], f"segments after the commit point survived: {later}"
            self.check_index(s, n)
        self.offset, self.n = end, n
        self.prefix_hash = self.committed_bytes_hash(end)

    def check_index(self, s: MessageStore, n: int) -> None:
        """The index holds exactly the committed records' keys, each once, and finds them."""
        service = IndexService(self.root / "index", StoreConfig().index, read_only=True)
        try:
            indexed = sorted(int(o) for f in service.files for o in f.items()["phy_offset"])
            offsets = [off for off, _ in s.iter_messages()]
            assert indexed == offsets, f"index holds {len(indexed)} items for {len(offsets)} committed records"
            for i in {0, n // 2, n - 1} if n else ():
                off = offsets[i]
                assert off in service.query(f"C{i % 3}", f"k{i}", 64), f"key k{i} not found at {off}"
        finally:
            service.close()


def test_sigkill_at_random_points_never_loses_a_commit_nor_keeps_uncommitted_bytes(tmp_path: Path) -> None:
    root, side, phase_file = tmp_path / "store", tmp_path / "side", tmp_path / "phase"
    phase_file.write_bytes(b"\0")
    checker = Checker(root, side)
    rng = random.Random(20261121)
    kill_phases: Counter[str] = Counter()
    started = time.monotonic()
    for round_ in range(KILLS):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            os.close(r)
            try:
                writer(root, side, phase_file, round_, w)
            finally:
                os._exit(1)
        os.close(w)
        if rng.random() < 0.1:
            time.sleep(rng.uniform(0, 0.05))          # maybe still opening / recovering
        else:
            ready, _, _ = select.select([r], [], [], 60)
            assert ready and os.read(r, 1) == b"r", "the writer died or hung before it was ready"
            time.sleep(rng.uniform(0.005, 0.25))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(r)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "the writer failed on its own"
        kill_phases[PHASES[phase_file.read_bytes()[0]]] += 1
        checker.check()
    elapsed = time.monotonic() - started
    print(f"\n{KILLS} kills in {elapsed:.1f}s at {dict(kill_phases)}; {checker.n} records, "
          f"{checker.offset} bytes committed")
    assert kill_phases["append"] and kill_phases["commit"] and checker.n > 500
    assert checker.offset > 5 * SEG                        # many rolls happened
