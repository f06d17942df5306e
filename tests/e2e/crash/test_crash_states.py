"""Power cuts, not only kills (issue 56, part 2): the disk states a power cut could leave at every sync
point of a writer (tests/helpers/faults/crash_states.py: snapshot k plus any subset of the pages sync k + 1 would
have made durable, torn pages and either file size included), recovered by our open and checked.

The writer (MessageStore, no Spark; 64 KiB segments, consume-queue files of 16 units, a small
index that fills a file) appends and commits batches across two segment rolls, then appends one
more and flushes it without committing. For each sampled state: ``MessageStore.open`` then
``close`` recover it; every batch whose commit returned before the next sync is there, whole and
readable in order and by queue, and nothing past the commit point is served; ``verify`` is clean
(consume queues and index agree with the commit log); appending the batches the state lacks gives
every message exactly once. Half the sampled states are harsher (ALICE's way: a file's pages durable
only as of its own last sync, not as of anyone's). Then RocketMQ 4.9 and 5.x brokers, each opened on two of the recovered
stores, serve the committed messages by queue offset."""

from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig, StoreReader
from store.index.file import IndexHeader
from store.index.service import IndexConfig
from store.read.view import open_view
from store.tools.verify import verify_source
from tests.helpers.faults.crash_states import CrashState, SyncRecorder
from tests.helpers.brokers.rocketmq import RocketBroker, clients

pytestmark = pytest.mark.slow(minutes=3)

ROOT = Path(__file__).resolve().parents[3]
SEG = 64 * 1024
BATCHES = 7                 # the first six are committed; the last is appended and flushed only
PER_BATCH = 24
TOPICS = ("T0", "T1", "T2")
SEED = 56
EXTRA_STATES = 400          # sampled beside one state per sync point
CLI_VERIFIED = 4            # states also checked with `python -m ingest.cli verify`
BROKER_STATES = 2           # recovered states each broker version serves


def message(i: int) -> Message:
    length = 200 + (i * 7919) % 1300
    return Message(topic=TOPICS[i % 3], queue_id=(i // 3) % 2, body=(f"{i}:".encode() * length)[:length],
                   properties=f"KEYS\x01k{i}\x02")


def batch(b: int) -> list[Message]:
    return [message(i) for i in range(b * PER_BATCH, (b + 1) * PER_BATCH)]


def config() -> StoreConfig:
    # no background flush: every msync is one of the commit's, so the sync points come in the same order each run
    return StoreConfig(segment_size=SEG, preallocate=False, flush_interval_ms=3_600_000,
                       flush_thorough_interval_ms=3_600_000, consume_queue_units=16,
                       index=IndexConfig(max_hash_slot_num=64, max_index_num=100))


def expected(batches: int) -> list[tuple[str, int, int, bytes]]:
    """(topic, queue id, queue offset, body) of every message of the first ``batches``, in order."""
    nxt: dict[tuple[str, int], int] = defaultdict(int)
    out = []
    for i in range(batches * PER_BATCH):
        m = message(i)
        out.append((m.topic, m.queue_id, nxt[(m.topic, m.queue_id)], m.body))
        nxt[(m.topic, m.queue_id)] += 1
    return out


@dataclass
class Recorded:
    recorder: SyncRecorder
    states: list[CrashState]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("recorded") / "store"
    recorder = SyncRecorder(root)
    with recorder.recording():
        store = MessageStore.open(root, config())
        for b in range(BATCHES - 1):
            store.append(batch(b))
            store.commit(metadata={"batches": b + 1})
            recorder.confirmed = b + 1
        store.append(batch(BATCHES - 1))
        store.flush()
        store.abandon()
    rng = random.Random(SEED)
    n = len(recorder.snapshots)
    states = [recorder.crash_state(k, rng) for k in range(n)]
    # and as harshly as ALICE: a file's pages durable only as of its own last sync
    states += [recorder.crash_state(rng.randrange(n), rng, per_file=i % 2 == 0) for i in range(EXTRA_STATES)]
    return Recorded(recorder, states)


def recover(state: CrashState, root: Path) -> int:
    """Write ``state`` to ``root``, recover it with our open and close; the batches it holds as committed."""
    state.write(root)
    store = MessageStore.open(root, config())
    batches = int(store.last_commit.metadata.get("batches", 0))
    store.close()
    return batches


def served(root: Path) -> list[tuple[str, int, int, bytes]]:
    with StoreReader.open(root) as reader:
        return [(m.topic, m.queue_id, m.queue_offset, bytes(m.body)) for _, m in reader.iter_messages()]


def check_reads(root: Path, batches: int) -> None:
    """Every message of the first ``batches`` served in order, by queue and by key; none after them."""
    want = expected(batches)
    assert served(root) == want
    by_queue: dict[tuple[str, int], list[tuple[str, int, int, bytes]]] = defaultdict(list)
    for row in want:
        by_queue[(row[0], row[1])].append(row)
    with StoreReader.open(root) as reader:
        for topic in TOPICS:
            for qid in (0, 1):
                rows = by_queue[(topic, qid)]
                assert reader.queue_range(topic, qid)[1] == len(rows), (topic, qid)
                got = reader.get_by_queue(topic, qid, 0, max_n=len(rows) + 8)
                assert [(m.topic, m.queue_id, m.queue_offset, bytes(m.body)) for m in got] == rows, (topic, qid)
        if batches:     # index/ comes with the first put
            last, after = batches * PER_BATCH - 1, batches * PER_BATCH
            assert [bytes(m.body) for _, m in reader.messages_by_key(message(last).topic, f"k{last}")] \
                == [message(last).body]
            assert reader.messages_by_key(message(after).topic, f"k{after}") == []


def check_verify(root: Path) -> None:
    report = verify_source(open_view(root))
    assert report.ok, [(p.offset, p.kind, p.detail) for p in report.problems][:5]


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the states are recovered: in memory where the machine has /dev/shm, since the checks are
    of what the open makes of the bytes, and hundreds of opens' fsyncs on a shared disk take minutes."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="crash-states-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def recovers_and_resumes(root: Path, committed: int) -> None:
    """The crashed store at ``root`` opens with its ``committed`` batches read back whole and verify
    clean, then takes the rest of the workload and holds every batch once."""
    assert recover(CrashState(0, {}, committed, "written"), root) == committed
    check_reads(root, committed)
    check_verify(root)
    resume(root, committed)


def resume(root: Path, committed: int) -> None:
    """The rest of the workload after ``committed`` batches: then every batch is held once."""
    with MessageStore.open(root, config()) as store:
        for b in range(committed, BATCHES):
            store.append(batch(b))
            store.commit(metadata={"batches": b + 1})
    check_reads(root, BATCHES)
    check_verify(root)


@pytest.mark.crash
def test_every_sync_point_recovers_to_a_committed_prefix(recorded: Recorded, fast_dir: Path) -> None:
    snapshots = recorded.recorder.snapshots
    assert sum(1 for s in snapshots if s.what.startswith("msync segment")) >= BATCHES   # the workload syncs
    assert len({s.files.keys() & {f"commitlog/{o:020d}" for o in (0, SEG, 2 * SEG)} == {
        f"commitlog/{o:020d}" for o in (0, SEG, 2 * SEG)} for s in snapshots}) == 2     # it rolls twice
    seen = defaultdict(int)
    for n, state in enumerate(recorded.states):
        root = fast_dir / f"state-{n}"
        try:
            batches = recover(state, root)
            # the commit in flight may have become durable too; nothing later can
            assert state.confirmed <= batches <= min(state.confirmed + 1, BATCHES - 1)
            check_reads(root, batches)
            check_verify(root)
            if n % (len(recorded.states) // CLI_VERIFIED) == 0:
                done = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(root)], cwd=ROOT,
                                      capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, done.stdout + done.stderr
            resume(root, batches)
        except BaseException as e:
            raise AssertionError(f"state {n} (a power cut after sync {state.after} of {len(snapshots)}, "
                                 f"{snapshots[state.after].what}; {state.how}): {e}") from e
        seen[batches] += 1
        shutil.rmtree(root)
    print(f"{len(recorded.states)} crash states over {len(snapshots)} sync points; committed batches: {dict(seen)}")


@pytest.mark.parametrize("cut", [512, 1024], ids=["items-zeroed", "item-torn"])
def test_index_items_a_power_cut_left_zeroed_or_torn_are_dropped(tmp_path: Path, cut: int) -> None:
    """The state the sweep found (a cut after a consume-queue fsync of batch 2's commit, before the
    index's msync): the IndexFile's first sectors new, its header counting batch 2's items, and the
    sectors of those items old, all zeros from ``cut`` on (1024 splits an item). The open kept the
    counted items (their offsets, 0, look committed) and every key look-up then refused the index as
    damaged ("endPhyOffset ..., but the last item's phyOffset is 0")."""
    root = tmp_path / "store"
    store = MessageStore.open(root, config())
    store.append(batch(0))
    store.commit(metadata={"batches": 1})
    (index,) = (root / "index").iterdir()
    old = index.read_bytes()
    store.append(batch(1))
    store.settle_index()
    new = index.read_bytes()
    store.abandon()
    assert old[:cut] != new[:cut] and old[cut:] != new[cut:]
    index.write_bytes(new[:cut] + old[cut:])
    recovers_and_resumes(root, 1)


def test_a_new_index_file_has_a_durable_header_before_its_name(recorded: Recorded) -> None:
    """A new IndexFile's header was written into its mapping and the file renamed without a sync:
    a power cut could leave the named file with a zero header ("indexCount 0 is outside
    1..maxIndexNum"), which every key look-up refused."""
    recorder = recorded.recorder
    seen: set[str] = set()
    for k, snap in enumerate(recorder.snapshots):
        for rel, image in snap.files.items():
            if rel.startswith("index/") and not rel.endswith(".tmp") and rel not in seen:
                seen.add(rel)
                header = IndexHeader.unpack(recorder.durable(k).get(image.inode, bytes(40)))
                assert header.index_count >= 1, f"{rel} named at sync {k} without a durable header"
    assert len(seen) == 2


def test_items_torn_in_a_full_index_file_before_an_empty_new_one_are_dropped(tmp_path: Path) -> None:
    """An uncommitted batch filled an IndexFile and began the next: a power cut left the new file
    with its durable header and no item, and the batch's items in the full one zeroed under its new
    header. The open took the zeroed items (offset 0) for committed ones and kept them; every key
    look-up then refused the index."""
    root = tmp_path / "store"
    store = MessageStore.open(root, config())
    for b in range(4):
        store.append(batch(b))
        store.commit(metadata={"batches": b + 1})
    (full,) = (root / "index").iterdir()
    old = full.read_bytes()
    store.append(batch(4))
    store.settle_index()
    new = full.read_bytes()
    store.abandon()
    (begun,) = set((root / "index").iterdir()) - {full}
    end = IndexHeader.unpack(new)
    start = IndexHeader(end.end_timestamp, end.end_timestamp, end.end_phy_offset, end.end_phy_offset)
    begun.write_bytes(start.pack().ljust(len(new), b"\0"))
    full.write_bytes(new[:512] + old[512:])
    recovers_and_resumes(root, 4)


@pytest.mark.integration
@pytest.mark.parametrize("version", ["4", "5"], ids=["rocketmq4", "rocketmq5"])
def test_rocketmq_brokers_serve_the_recovered_stores(recorded: Recorded, version: str, rocketmq_nameservers: object,
                                                      tmp_path: Path) -> None:
    """A broker opened on a recovered state serves every committed message by queue offset, and
    each queue ends where the committed batches end."""
    picks = random.Random(SEED + 1).sample([s for s in recorded.states if s.confirmed >= 2], BROKER_STATES)
    ns = rocketmq_nameservers.get(version)  # type: ignore[attr-defined]
    for n, state in enumerate(picks):
        root = tmp_path / f"state-{n}" / "store"
        batches = recover(state, root)
        with RocketBroker.start(root, ns, version):
            rows = clients(version).run("pull", ns.address, f"crash-states-{n}", *TOPICS)
        want = expected(batches)
        got = [(r["topic"], r["queueId"], r["queueOffset"], base64.b64decode(r["body"])) for r in rows if "via" in r]
        assert sorted(got) == sorted(want), f"state after sync {state.after}: {len(got)} of {len(want)} served"
        print(f"RocketMQ {version}: the state after sync {state.after} ({batches} batches) served whole")
        ends = {(r["queue"], r["queueId"]): (r["status"], r["max"]) for r in rows if "status" in r}
        counts = {(t, q): sum(1 for w in want if w[:2] == (t, q)) for t in TOPICS for q in (0, 1)}
        assert ends == {k: ("NO_NEW_MSG", c) for k, c in counts.items()}
