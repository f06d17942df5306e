"""RocketMQ's own broker serves a store whose consume-queue files and IndexFile were reserved in
steps (issue 64, item 1): 200 queues of a few messages each, written in two appends, the second
after the store was closed and opened again (which reserves on from what the files hold). Every
file keeps its full length (the broker checks it) while it takes a page or two of disk; the
broker loads the store and its pull consumer reads every queue to its end, each message once,
4.9 and 5.x alike."""

from __future__ import annotations

import base64
from collections import Counter
from pathlib import Path

import pytest

from store import IndexConfig, Message, MessageStore, StoreConfig
from store.topics import merge_topics
from tests.helpers.brokers.rocketmq import RocketBroker, clients

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=0.8)]

VERSIONS = ["4", "5"]
TOPICS, QUEUES = 20, 10
CQ_FILE = 300_000 * 20                # RocketMQ's default consume-queue file
CONFIG = StoreConfig(segment_size=4 << 20, preallocate=False,
                     index=IndexConfig(True, max_hash_slot_num=50_000, max_index_num=200_000))


def _messages(round_: int) -> list[Message]:
    """Queue q of topic t gets 1 + (t + q) % 3 messages a round."""
    out = []
    for t in range(TOPICS):
        for q in range(QUEUES):
            for i in range(1 + (t + q) % 3):
                body = f"r{round_} t{t} q{q} m{i}".encode()
                out.append(Message(f"Stepped{t}", body, queue_id=q,
                                   properties=f"KEYS\x01k{round_}-{t}-{q}-{i}\x02"))
    return out


@pytest.fixture(scope="module")
def stepped_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter]:
    root = tmp_path_factory.mktemp("stepped") / "store"
    sent: Counter = Counter()
    for round_ in range(2):
        with MessageStore.open(root, CONFIG) as store:
            batch = _messages(round_)
            store.append(batch)
            store.commit()
            sent.update((m.topic, m.queue_id) for m in batch)
    merge_topics(root, {f"Stepped{t}": QUEUES for t in range(TOPICS)})
    return root, sent


def test_each_queue_file_has_its_full_length_and_a_page_or_two_of_disk(stepped_store: tuple[Path, Counter]) -> None:
    root, sent = stepped_store
    files = sorted((root / "consumequeue").glob("Stepped*/*/*"))
    assert len(files) == TOPICS * QUEUES
    for f in files:
        st = f.stat()
        assert st.st_size == CQ_FILE, f
        assert st.st_blocks * 512 <= 2 * 4096, (f, st.st_blocks)
    index = sorted((root / "index").iterdir())
    slots_and_header = 40 + 4 * 50_000
    assert len(index) == 1 and index[0].stat().st_size == slots_and_header + 20 * 200_000
    # most of the small table's pages touched: the file is dense, its items reserved to a 2 MiB end
    assert index[0].stat().st_blocks * 512 <= (2 << 20) + (16 << 10)


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"rocketmq{v}" for v in VERSIONS])
def served(request: pytest.FixtureRequest, stepped_store: tuple[Path, Counter], rocketmq_nameservers: object,
           tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - (version, namesrv) while the broker runs
    import shutil

    version = request.param
    store = tmp_path_factory.mktemp(f"stepped-rocketmq{version}") / "store"
    shutil.copytree(stepped_store[0], store)
    ns = rocketmq_nameservers.get(version)  # type: ignore[attr-defined]
    broker = RocketBroker.start(store, ns, version)
    try:
        yield version, ns.address
    finally:
        broker.stop()


def test_the_broker_serves_every_queue_to_its_end(served: tuple[str, str],
                                                   stepped_store: tuple[Path, Counter]) -> None:
    version, namesrv = served
    _, sent = stepped_store
    out = clients(version).run("pull", namesrv, "stepped-pull", *[f"Stepped{t}" for t in range(TOPICS)])
    ends = [r for r in out if "status" in r]
    assert len(ends) == TOPICS * QUEUES
    assert all(r["status"] == "NO_NEW_MSG" and r["next"] == r["max"] for r in ends), ends
    rows = [r for r in out if "via" in r]
    got = Counter((r["topic"], r["queueId"]) for r in rows)
    assert got == sent
    bodies = Counter(base64.b64decode(r["body"]).decode() for r in rows)
    assert len(bodies) == len(rows) and all(n == 1 for n in bodies.values())
