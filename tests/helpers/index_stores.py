"""Stores with an index for the index tests (keys an hour apart, a small index), and where an
index file's parts lie; the keys RocketMQ's rule gives decoded messages (the oracle of the C pass)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

from hypothesis import strategies as st

from store import EncodedBatch, MessageStore, StoreConfig
from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, Message
from store.format.properties import string_to_properties
from store.index.hashing import index_key_hashes
from store.index.keys import indexed_keys
from store.index.service import IndexConfig
from store.index.settings import IndexSettings, write_index_settings

T0 = 1_700_000_000_000


def keyed(topic: str, i: int, keys: str) -> Message:
    return Message(topic, f"body-{i}".encode(), queue_id=i % 2,
                   properties=f"KEYS\x01{keys}\x02UNIQ_KEY\x01U{i:031d}\x02")


def write_store(root: Path, index: IndexConfig | None = None, batches: int = 3) -> list[int]:
    """Three batches an hour apart: T1 messages keyed "k<i> shared", T2 keyed "Aa" (its hash is
    the hash of "BB": "T2#Aa" and "T2#BB" share a hash slot chain)."""
    config = StoreConfig(segment_size=1 << 16, index=index or IndexConfig())
    offsets = []
    with MessageStore.open(root, config) as store:
        for b in range(batches):
            msgs = [keyed("T1", b * 10 + i, f"k{b * 10 + i} shared") for i in range(8)] + \
                   [keyed("T2", b * 10 + 8, "Aa")]
            res = store.append_encoded(encoded_batch(msgs), store_timestamp=T0 + b * 3_600_000)
            offsets += res.physical_offsets.tolist()
            store.commit()
    return offsets


def encoded_batch(msgs: list[Message]) -> EncodedBatch:
    return encode_messages(msgs, CodecConfig())


SLOTS, ITEMS = 64, 256
HEADER, SLOT_TABLE = 40, 4 * SLOTS


def small_index_store(root: Path) -> list[int]:
    return write_store(root, IndexConfig(True, SLOTS, ITEMS))


def overwrite(path: Path, at: int, length: int, seed: int) -> None:
    data = bytearray(path.read_bytes())
    data[at:at + length] = random.Random(seed).randbytes(length)
    path.write_bytes(bytes(data))


def item_at(index_file: Path, i: int) -> tuple[int, int]:
    """(keyHash, phyOffset) of item ``i`` (0-based) of a small-index file."""
    data = index_file.read_bytes()[HEADER + SLOT_TABLE + 20 * i:][:12]
    return int.from_bytes(data[:4], "big"), int.from_bytes(data[4:12], "big")


def golden_index_stores(golden_dir: Path, tmp_path: Path) -> Iterator[tuple[Path, dict, Path]]:
    """Each IndexFile vector of RocketMQ's own (../shared/golden/INDEX_FORMAT_NOTES.md) with the store
    it indexes, copied under ``tmp_path`` as one store: (its case folder, its settings.json, the store)."""
    cases = sorted(p.parent for p in golden_dir.glob("store_*_index/**/settings.json"))
    assert cases
    for i, case in enumerate(cases):
        settings = json.loads((case / "settings.json").read_text())
        store = tmp_path / str(i)
        shutil.copytree(golden_dir / settings["store"], store)
        shutil.copytree(case / "index", store / "index")
        write_index_settings(store, IndexSettings(settings["maxHashSlotNum"], settings["maxIndexNum"]))
        yield case, settings, store


# property text and names as hypothesis draws them: separators, keys' names, non-ASCII
property_texts = st.lists(
    st.sampled_from(list("ab \x01\x02Ué#") + ["KEYS", "UNIQ_KEY", "KEYS\x01", "UNIQ_KEY\x01", "\U0001F600", "\u6771",
                                              "abcdefghij"]),
    max_size=8).map("".join)
property_names = st.one_of(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS"]), property_texts)


def expected(messages: list[Message]) -> tuple[list[int], list[int]]:
    records, hashes = [], []
    for i, m in enumerate(messages):
        keys = indexed_keys(string_to_properties(m.properties), m.sys_flag)
        records += [i] * len(keys)
        hashes += index_key_hashes([m.topic] * len(keys), keys).tolist()
    return records, hashes
