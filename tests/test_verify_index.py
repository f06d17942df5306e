"""verify checks the index items inside each segment's pieces (store.tools.verify_index.PieceIndex):
in pieces, in processes, the same items are checked and the same problems found, capped alike, as
in one process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from store import MessageStore, StoreConfig
from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, Message
from store.index.service import IndexConfig
from store.log.source import open_source
from store.tools.verify import verify_source
from store.tools.verify_index import MAX_REPORTED

pytestmark = pytest.mark.unit
SEG = 1 << 16
ITEM = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
SLOTS = 101


def write_store(root: Path) -> tuple[int, list[int]]:
    """Segments of 64 KiB, two keys a message; (keys put, record offsets)."""
    offsets: list[int] = []
    with MessageStore.open(root, StoreConfig(segment_size=SEG, index=IndexConfig(True, SLOTS, 100_000))) as s:
        for b in range(40):
            msgs = [Message("T", b"x" * (30 + i % 50), queue_id=i % 2,
                            properties=f"KEYS\x01k{b}-{i}\x02UNIQ_KEY\x01U{b:04d}{i:04d}\x02") for i in range(60)]
            offsets += s.append_encoded(encode_messages(msgs, CodecConfig())).physical_offsets.tolist()
            s.commit()
    return 2 * len(offsets), offsets


def both_ways(root: Path, monkeypatch: pytest.MonkeyPatch):
    serial = verify_source(open_source(root), jobs=1)
    monkeypatch.setattr("store.tools.verify.PIECE_BYTES", 16 * 1024)   # four pieces per segment
    in_pieces = verify_source(open_source(root), jobs=2)
    monkeypatch.undo()
    return serial, in_pieces


def test_every_item_is_checked_once_in_pieces_as_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    keys, _ = write_store(tmp_path / "s")
    serial, in_pieces = both_ways(tmp_path / "s", monkeypatch)
    assert serial.ok and in_pieces.ok, (serial.problems, in_pieces.problems)
    assert serial.segments > 5
    assert serial.index_items_checked == in_pieces.index_items_checked == keys


def test_bad_items_in_every_piece_are_found_and_capped_as_in_one_process(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    keys, offsets = write_store(tmp_path / "s")
    index_file = next((tmp_path / "s" / "index").iterdir())
    data = bytearray(index_file.read_bytes())
    at = 40 + 4 * SLOTS
    items = np.frombuffer(data, dtype=ITEM, count=keys + 1, offset=at).copy()
    bad_hash = list(range(1, keys, 97))                    # spread over every segment
    inside = list(range(50, keys, 131))
    items["key_hash"][bad_hash] ^= 0x5A5A
    items["phy_offset"][inside] += 3
    data[at:at + items.nbytes] = items.tobytes()
    index_file.write_bytes(bytes(data))
    serial, in_pieces = both_ways(tmp_path / "s", monkeypatch)
    assert [(p.offset, p.kind, p.detail) for p in in_pieces.problems] == \
        [(p.offset, p.kind, p.detail) for p in serial.problems]
    kinds = [p.kind for p in serial.problems]
    assert kinds.count("indexKey") == kinds.count("indexItem") == MAX_REPORTED + 1   # 20, then "more ..."
    first_bad = min(int(items["phy_offset"][i]) for i in bad_hash if i not in inside)
    assert ("indexKey", first_bad) in {(p.kind, p.offset) for p in serial.problems}
    assert serial.index_items_checked == in_pieces.index_items_checked == keys
