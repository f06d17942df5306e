"""verify checks index/, all of it, and a lookup never answers "not found" from a damaged index:
random bytes over a file's header or over its hash-slot table alone are found by verify and make
`get --key` say the index is damaged and name `commitlog reindex`; RocketMQ's own IndexFiles pass;
a key of a committed message that no item holds is reported, and so is an index/ that
config/messageIndex.json says is on but is not there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from store import MessageStore, StoreConfig
from store.format.codec import Message
from store.index.service import IndexConfig
from store.index.settings import IndexSettings, write_index_settings
from store.read.view import open_view
from store.tools.verify import verify_source
from tests.helpers.cli import run
from tests.helpers.index_stores import (
    HEADER,
    ITEMS,
    SLOT_TABLE,
    SLOTS,
    golden_index_stores,
    item_at,
    overwrite,
    small_index_store,
)

pytestmark = pytest.mark.unit


def verify(root: Path) -> tuple[int, dict]:
    rc, out, _ = run("verify", str(root), "--json")
    return rc, json.loads(out)


def kinds(report: dict) -> set[str]:
    return {p["kind"] for p in report["problems"]}


def assert_get_says_damaged(root: Path) -> None:
    for key in ("k1", "shared", "no-such-key"):
        rc, out, err = run("get", str(root), "--topic", "T1", "--key", key)
        assert rc == 2 and out == "", (key, rc, out, err)
        assert "damaged" in err and f"commitlog reindex {root}" in err and "carries" not in err, err


def test_a_clean_index_verifies_and_is_looked_up(tmp_path: Path) -> None:
    small_index_store(tmp_path / "s")
    rc, report = verify(tmp_path / "s")
    assert rc == 0 and report["index_items_checked"] == 78, report["problems"]
    assert run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "k1")[0] == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes_over_an_index_header_are_found(tmp_path: Path, seed: int) -> None:
    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    overwrite(index_file, 0, HEADER, seed)
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and "indexHeader" in kinds(report), report["problems"]
    assert_get_says_damaged(tmp_path / "s")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes_over_the_hash_slot_table_alone_are_found(tmp_path: Path, seed: int) -> None:
    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    overwrite(index_file, HEADER, SLOT_TABLE, seed)
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and "indexSlot" in kinds(report), report["problems"]
    assert report["index_items_checked"] == 78
    assert_get_says_damaged(tmp_path / "s")


def test_one_slot_pointing_at_an_older_item_of_its_chain_is_found(tmp_path: Path) -> None:
    """The subtlest slot damage: still inside the items, but not the newest of its chain (a lookup
    would miss every newer item of the slot)."""
    import numpy as np

    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    data = bytearray(index_file.read_bytes())
    slots = np.frombuffer(bytes(data[HEADER:HEADER + SLOT_TABLE]), dtype=">i4").copy()
    items = np.frombuffer(bytes(data[HEADER + SLOT_TABLE + 20:HEADER + SLOT_TABLE + 20 * 79]),
                          dtype=[("key_hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
    slot = next(s for s in range(SLOTS) if slots[s] and items["prev"][slots[s] - 1])   # a chain of two or more
    slots[slot] = items["prev"][slots[slot] - 1]
    data[HEADER:HEADER + SLOT_TABLE] = slots.tobytes()
    index_file.write_bytes(bytes(data))
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and any(p["kind"] == "indexSlot" and f"hash slot {slot} " in p["detail"]
                           for p in report["problems"]), report["problems"]


def test_random_bytes_over_items_are_found(tmp_path: Path) -> None:
    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    overwrite(index_file, HEADER + SLOT_TABLE + 20 * 30, 20 * 5, 7)
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and kinds(report) & {"indexChain", "indexKey", "indexItem", "indexTime"}, report["problems"]


def test_a_key_no_item_holds_is_reported_at_its_message(tmp_path: Path) -> None:
    """The index cut back by one message's keys, its header and slots kept consistent (what a
    writer's trim does): only the comparison of every key with the items can tell."""
    from store.index.file import IndexFile

    offsets = small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    f = IndexFile(index_file, SLOTS, ITEMS)
    f.truncate_before(offsets[-1], lambda phy: 1_700_000_000_000 + 2 * 3_600_000)
    f.flush()
    f.close()
    rc, report = verify(tmp_path / "s")
    missing = [p for p in report["problems"] if p["kind"] == "indexKeyMissing"]
    assert rc == 1 and {p["offset"] for p in missing} == {offsets[-1]}, report["problems"]
    assert "commitlog reindex" in missing[0]["detail"]


def test_an_item_with_another_hash_is_reported_and_its_key_as_missing(tmp_path: Path) -> None:
    """One item's keyHash changed in place: the item no longer matches a key of its message, and
    that message's key is held by no item: both are named at the message."""
    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    key_hash, phy = item_at(index_file, 30)
    data = bytearray(index_file.read_bytes())
    at = HEADER + SLOT_TABLE + 20 * 30
    data[at:at + 4] = ((key_hash + 1) % (1 << 31)).to_bytes(4, "big")
    index_file.write_bytes(bytes(data))
    rc, report = verify(tmp_path / "s")
    found = {(p["kind"], p["offset"]) for p in report["problems"]}
    assert rc == 1 and {("indexKey", phy), ("indexKeyMissing", phy)} <= found, report["problems"]


def test_a_key_whose_item_took_another_keys_hash_is_missing(tmp_path: Path) -> None:
    """Two items of one message with the same (offset, hash): every item still matches a key of its
    message and there are as many items as keys, but the key whose item was overwritten has none."""
    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    i = next(i for i in range(1, 77) if item_at(index_file, i)[1] == item_at(index_file, i + 1)[1]
             and item_at(index_file, i)[0] != item_at(index_file, i + 1)[0])
    other_hash, phy = item_at(index_file, i + 1)
    data = bytearray(index_file.read_bytes())
    at = HEADER + SLOT_TABLE + 20 * i
    data[at:at + 4] = other_hash.to_bytes(4, "big")
    index_file.write_bytes(bytes(data))
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and ("indexKeyMissing", phy) in {(p["kind"], p["offset"]) for p in report["problems"]}, \
        report["problems"]


def test_items_out_of_order_still_match_their_messages_keys(tmp_path: Path) -> None:
    """Two items of different messages swapped: the files' order and chains are damaged, but every
    item still points at a message with its key and every key still has its item."""
    small_index_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    i = next(i for i in range(40, 77) if item_at(index_file, i)[1] != item_at(index_file, i + 1)[1])
    data = bytearray(index_file.read_bytes())
    a = HEADER + SLOT_TABLE + 20 * i
    data[a:a + 40] = data[a + 20:a + 40] + data[a:a + 20]
    index_file.write_bytes(bytes(data))
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and report["index_items_checked"] == 78, report["problems"]
    assert not kinds(report) & {"indexKey", "indexKeyMissing", "indexTime"}, report["problems"]
    # the one indexItem problem is the order (an item below the one before it), not a lost record
    assert [p["detail"] for p in report["problems"] if p["kind"] == "indexItem"] == \
        [f"{index_file.name}: item {i + 1}: phyOffset {item_at(index_file, i + 1)[1]} is below item {i}'s "
         f"{item_at(index_file, i)[1]}"], report["problems"]


@pytest.mark.parametrize("damage", ["none", "totalSize"])
def test_the_index_checked_beside_the_pieces_gives_the_serial_verdict(tmp_path: Path, damage: str) -> None:
    """With worker processes the index is checked on a thread beside them, up to the commit point;
    when the pieces find the data ending before it (a record's TOTALSIZE broken), it is checked
    again up to their end: the items past it are past the valid data, as one process says."""
    offsets = small_index_store(tmp_path / "s")
    if damage == "totalSize":
        segment = tmp_path / "s" / "commitlog" / "0".zfill(20)
        data = bytearray(segment.read_bytes())
        data[offsets[12]:offsets[12] + 4] = (5).to_bytes(4, "big")
        segment.write_bytes(bytes(data))
    serial = verify_source(open_view(tmp_path / "s"), jobs=1)
    beside = verify_source(open_view(tmp_path / "s"), jobs=2)
    assert [(p.offset, p.kind, p.detail) for p in beside.problems] == \
        [(p.offset, p.kind, p.detail) for p in serial.problems]
    assert beside.index_items_checked == serial.index_items_checked
    if damage == "none":
        assert serial.ok and serial.index_items_checked == 78
    else:
        assert serial.data_end == offsets[12] and serial.index_items_checked < 78
        assert "indexPastCommit" in {p.kind for p in serial.problems}, serial.problems


def test_an_index_said_to_be_on_but_missing_is_reported(tmp_path: Path) -> None:
    offsets = small_index_store(tmp_path / "s")
    shutil.rmtree(tmp_path / "s" / "index")
    rc, report = verify(tmp_path / "s")
    assert rc == 1 and [p["kind"] for p in report["problems"]] == ["indexMissing"], report["problems"]
    assert report["problems"][0]["offset"] == offsets[0] and "78 keys" in report["problems"][0]["detail"]


def test_a_store_with_the_index_on_but_no_keys_needs_no_index(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 16, index=IndexConfig(True, SLOTS, ITEMS))) \
            as store:
        store.append([Message("T", b"no keys")])
        store.commit()
    # the index thread may have made an IndexFile, as RocketMQ's buildIndex makes one for any
    # message: it holds no item, and nothing is missing from it
    assert verify(tmp_path / "s")[0] == 0


def test_an_index_written_with_gaps_is_not_held_to_every_key(tmp_path: Path) -> None:
    """messageIndex.json says the index misses messages (written with it off for a while): the
    keys it lacks are what `reindex` is for, not damage."""
    offsets = small_index_store(tmp_path / "s")
    shutil.rmtree(tmp_path / "s" / "index")
    write_index_settings(tmp_path / "s", IndexSettings(SLOTS, ITEMS, complete=False))
    assert verify(tmp_path / "s")[0] == 0 and offsets


def test_rocketmqs_own_index_files_verify_clean(golden_dir: Path, tmp_path: Path) -> None:
    for case, settings, store in golden_index_stores(golden_dir, tmp_path):
        rc, report = verify(store)
        assert rc == 0 and report["index_items_checked"] == settings["indexEntries"], (case, report["problems"])
