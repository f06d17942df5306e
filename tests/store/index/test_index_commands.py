"""Lookups by key through index/ (`get --key`, `--uniq-key`), `reindex`, and the decoding a user
sees in `get`/`dump`/`verify`: compressed bodies, the whole-record CRC, a topic the store lacks."""

from __future__ import annotations

import base64
import json
import shutil
import zlib
from pathlib import Path

import lz4.frame
import pytest
import zstandard

from store import MessageStore, StoreConfig, StoreReader
from store.format.codec import CodecConfig, Message
from store.format.constants import COMPRESSED_FLAG, COMPRESSION_LZ4, COMPRESSION_ZSTD
from store.index.service import IndexConfig
from tests.helpers.cli import jsonl, run
from tests.helpers.index_stores import T0, encoded_batch, keyed, write_store

pytestmark = pytest.mark.unit


def test_get_by_key_returns_every_message_carrying_it_in_offset_order(tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "s")
    rc, out, err = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "shared", "--json")
    assert rc == 0, err
    got = jsonl(out)
    assert [m["physicalOffset"] for m in got] == sorted(o for i, o in enumerate(offsets) if i % 9 != 8)
    assert all("shared" in m["properties"]["KEYS"].split(" ") for m in got)

    rc, out, _ = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "k12", "--json")
    assert rc == 0 and [m["physicalOffset"] for m in jsonl(out)] == [offsets[9 + 2]]


def test_get_by_uniq_key_and_time_bounds(tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "s")
    rc, out, _ = run("get", str(tmp_path / "s"), "--topic", "T1", "--uniq-key", f"U{13:031d}", "--json")
    assert rc == 0 and [m["offset"] for m in jsonl(out)] == [offsets[9 + 3]]
    # only the second hour: --begin / --end as epoch ms and as ISO 8601
    rc, out, _ = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "shared", "--json",
                     "--begin", str(T0 + 3_600_000), "--end", str(T0 + 3_600_000))
    assert rc == 0 and [m["storeTimestamp"] for m in jsonl(out)] == [T0 + 3_600_000] * 8


def test_a_key_whose_hash_collides_finds_nothing_but_the_raw_lookup_sees_the_other(tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "s")
    rc, out, err = run("get", str(tmp_path / "s"), "--topic", "T2", "--key", "BB")
    assert rc == 1 and out == "" and "no message of topic 'T2' carries key 'BB'" in err
    with StoreReader.open(tmp_path / "s") as reader:
        assert sorted(reader.key_offsets("T2", "BB")) == [offsets[8], offsets[17], offsets[26]]
        assert [o for o, _ in reader.messages_by_key("T2", "Aa")] == [offsets[8], offsets[17], offsets[26]]


def test_lookup_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    write_store(tmp_path / "s", batches=1)
    rc, _, err = run("get", str(tmp_path / "s"), "--key", "shared")
    assert rc == 2 and "needs --topic" in err and "Traceback" not in err
    rc, _, err = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "x", "--begin", "yesterday")
    assert rc == 2 and "--begin 'yesterday'" in err
    rc, _, err = run("reindex", str(tmp_path / "s"), "--max-index-num", "1")
    assert rc == 2 and "maxIndexNum 1" in err


def test_reindex_builds_the_index_the_appends_would_have_built(tmp_path: Path) -> None:
    write_store(tmp_path / "a")
    write_store(tmp_path / "b", IndexConfig(enabled=False))
    rc, _, err = run("get", str(tmp_path / "b"), "--topic", "T1", "--key", "shared")
    assert rc == 2 and "no index/" in err and "commitlog reindex" in err
    rc, out, err = run("reindex", str(tmp_path / "b"))
    assert rc == 0, err
    assert "27 messages, 78 keys in 1 index file(s)" in out
    a = sorted((tmp_path / "a" / "index").iterdir())
    b = sorted((tmp_path / "b" / "index").iterdir())
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    rc, out, _ = run("get", str(tmp_path / "b"), "--topic", "T1", "--key", "k3", "--json")
    assert rc == 0 and len(jsonl(out)) == 1


def test_reindex_with_small_files_rolls_over_and_the_writer_keeps_that_geometry(tmp_path: Path) -> None:
    offsets = write_store(tmp_path / "s", batches=2)
    rc, out, err = run("reindex", str(tmp_path / "s"), "--max-hash-slot-num", "4", "--max-index-num", "8")
    assert rc == 0, err
    files = sorted((tmp_path / "s" / "index").iterdir())
    assert len(files) == 8 and all(p.stat().st_size == 40 + 4 * 4 + 20 * 8 for p in files)   # 52 keys, 7 a file
    # a writer opened with the default settings keeps the index's own, and goes on indexing
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 16)) as store:
        store.append_encoded(encoded_batch([keyed("T1", 99, "late")]))
        store.commit()
    rc, out, _ = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "late", "--json")
    assert rc == 0 and jsonl(out)[0]["physicalOffset"] > offsets[-1]
    rc, out, _ = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "k1", "--json")
    assert rc == 0 and [m["physicalOffset"] for m in jsonl(out)] == [offsets[1]]


def test_reindex_refuses_while_a_writer_holds_the_store(tmp_path: Path) -> None:
    write_store(tmp_path / "s", batches=1)
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 16)):
        rc, _, err = run("reindex", str(tmp_path / "s"))
    assert rc == 2 and "lock" in err.lower() and "Traceback" not in err


def test_dump_of_a_topic_or_queue_the_store_does_not_hold_says_so(tmp_path: Path) -> None:
    write_store(tmp_path / "s", batches=1)
    rc, _, err = run("dump", str(tmp_path / "s"), "--topic", "Nope")
    assert rc == 1 and "no message of topic 'Nope'" in err and "T1, T2" in err
    rc, _, err = run("dump", str(tmp_path / "s"), "--topic", "T2", "--queue", "1")
    assert rc == 1 and "queue 1 of topic 'T2'" in err and "queues: 0" in err
    rc, out, _ = run("dump", str(tmp_path / "s"), "--topic", "T2")
    assert rc == 0 and out.count("T2") >= 1


@pytest.mark.parametrize("sys_flag, pack", [
    (COMPRESSED_FLAG, zlib.compress),                                  # type bits 0: ZLIB
    (COMPRESSED_FLAG | COMPRESSION_LZ4, lz4.frame.compress),
    (COMPRESSED_FLAG | COMPRESSION_ZSTD, lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_get_decompress_shows_a_compressed_body_as_the_consumer_reads_it(tmp_path: Path, sys_flag, pack) -> None:
    plain = b"the consumer reads this " * 40
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 16)) as store:
        off = int(store.append([Message("T", pack(plain), sys_flag=sys_flag)]).physical_offsets[0])
        store.commit()
    rc, out, err = run("get", str(tmp_path / "s"), "--offset", str(off), "--json", "--decompress")
    assert rc == 0, err
    m = json.loads(out)
    assert m["sysFlagBits"]["compressed"] and m["sysFlagBits"]["compressionType"] in ("ZLIB", "LZ4", "ZSTD")
    assert base64.b64decode(m["decompressedBodyBase64"]) == plain
    rc, out, _ = run("get", str(tmp_path / "s"), "--offset", str(off), "--json")
    assert "decompressedBodyBase64" not in json.loads(out)


def test_a_compressed_flag_without_type_bits_is_zlib(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 16)) as store:
        off = int(store.append([Message("T", zlib.compress(b"x"), sys_flag=COMPRESSED_FLAG)]).physical_offsets[0])
        store.commit()
    rc, out, _ = run("dump", str(tmp_path / "s"), "--json")
    first = jsonl(out)[0]
    assert first["offset"] == off and first["sysFlagBits"]["compressionType"] == "ZLIB"


def test_the_whole_record_crc_is_shown_by_dump_and_checked_by_verify(tmp_path: Path) -> None:
    config = StoreConfig(segment_size=1 << 16, codec=CodecConfig(enabled_append_prop_crc=True))
    with MessageStore.open(tmp_path / "s", config) as store:
        offs = store.append([Message("T", b"a", properties="KEYS\x01k\x02"), Message("T", b"b")]).physical_offsets
        store.commit()
    rc, out, _ = run("dump", str(tmp_path / "s"), "--json")
    msgs = [m for m in jsonl(out) if m.get("type") == "message"]
    assert [m["propertiesCRCOk"] for m in msgs] == [True, True]
    rc, out, _ = run("verify", str(tmp_path / "s"))
    assert rc == 0, out
    # a flipped byte in the born timestamp: the body CRC does not see it, the whole-record CRC does
    seg = next((tmp_path / "s" / "commitlog").iterdir())
    data = bytearray(seg.read_bytes())
    data[int(offs[1]) + 47] ^= 0x01
    seg.write_bytes(bytes(data))
    rc, out, _ = run("dump", str(tmp_path / "s"), "--json")
    assert [m["propertiesCRCOk"] for m in jsonl(out) if m.get("type") == "message"] == [True, False]
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    assert rc == 1
    assert any(p["offset"] == int(offs[1]) and p["kind"] == "propCrc" for p in report["problems"]), report


def test_a_copy_without_index_is_reindexed_to_the_same_bytes(tmp_path: Path) -> None:
    write_store(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "index")
    (tmp_path / "b" / "config" / "messageIndex.json").unlink()
    assert run("reindex", str(tmp_path / "b"))[0] == 0
    a = [p.read_bytes() for p in sorted((tmp_path / "a" / "index").iterdir())]
    assert a == [p.read_bytes() for p in sorted((tmp_path / "b" / "index").iterdir())]


def test_verify_checks_every_index_item_against_the_record_it_points_at(tmp_path: Path) -> None:
    import numpy as np

    offsets = write_store(tmp_path / "s")
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    assert rc == 0 and report["index_items_checked"] == 78, report["problems"]
    index_file = next((tmp_path / "s" / "index").iterdir())
    data = bytearray(index_file.read_bytes())
    items_at = 40 + 4 * 5_000_000                     # header, then the default 5M hash slots
    item = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
    view = np.frombuffer(data, dtype=item, count=4, offset=items_at + 20)     # items 1..4
    view = view.copy()
    view["key_hash"][0] ^= 0x5A5A                    # item 1: the first message's UNIQ_KEY, hash changed
    view["phy_offset"][1] = offsets[0] + 3           # item 2: points inside a record
    data[items_at + 20:items_at + 20 + 80] = view.tobytes()
    index_file.write_bytes(bytes(data))
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    problems = {(p["kind"], p["offset"]) for p in json.loads(out)["problems"]}
    assert rc == 1
    assert ("indexKey", offsets[0]) in problems and ("indexItem", offsets[0] + 3) in problems, problems
