"""Benchmark records: the issue's messages (10-byte topic, ~50 bytes of properties, 4 queues) as
Arrow tables in the store's MESSAGE_TABLE_SCHEMA, built without a Python loop per record."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import QUEUES, SEED, TOPIC  # noqa: E402


def _binary_column(n: int, width: int, rng: np.random.Generator) -> pa.Array:
    """``n`` random binary values of ``width`` bytes, built from one numpy buffer (no Python loop)."""
    data = rng.integers(0, 256, size=n * width, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32 if n * width < 2**31 else np.int64)
    typ = pa.binary() if offsets.dtype == np.int32 else pa.large_binary()
    arr = pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return arr if typ == pa.binary() else arr.cast(pa.binary())


def _repeated_binary(value: bytes, n: int, typ: pa.DataType = pa.binary()) -> pa.Array:
    data = np.tile(np.frombuffer(value, dtype=np.uint8), n)
    offsets = np.arange(0, (n + 1) * len(value), len(value), dtype=np.int32)
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _padded(numbers: np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), width=width, padding="0")


def message_table(n: int, body_size: int = 100, seed: int = SEED, start: int = 0) -> pa.Table:
    """``n`` messages in the store's MESSAGE_TABLE_SCHEMA: ``body_size``-byte random bodies, the
    10-byte topic, ~50 bytes of properties (TAGS, KEYS, UNIQ_KEY), 4 queues, IPv4 hosts."""
    rng = np.random.default_rng(seed + start)
    idx = np.arange(start, start + n, dtype=np.int64)
    tag_names = np.array(["TagA", "TagB", "TagC", "TagD"])
    tags = pa.array(tag_names[idx % 4])
    # TAGS\1TagA\2 (10) + KEYS\1<12 digits>\2 (18) + UNIQ_KEY\1<12 digits>\2 (22) = 50 bytes
    props = pc.binary_join_element_wise(
        "TAGS\x01", tags, "\x02KEYS\x01", _padded(idx, 12), "\x02UNIQ_KEY\x01",
        _padded(idx * 7 + 13, 12), "\x02", "")
    born = np.array([127, 0, 0, 1, 0, 0, 0x30, 0x39], dtype=np.uint8).tobytes()      # 127.0.0.1:12345
    store_host = np.array([127, 0, 0, 1, 0, 0, 0x2A, 0x9F], dtype=np.uint8).tobytes()  # :10911
    cols = {
        "topic": _repeated_binary(TOPIC.encode(), n, pa.string()),
        "queue_id": pa.array((idx % QUEUES).astype(np.int32)),
        "flag": pa.array(np.zeros(n, np.int32)),
        "body": _binary_column(n, body_size, rng),
        "properties": props,
        "tags": tags,
        "sys_flag": pa.array(np.zeros(n, np.int32)),
        "born_timestamp": pa.array(1_700_000_000_000 + idx),
        "born_host": _repeated_binary(born, n),
        "store_host": _repeated_binary(store_host, n),
        "reconsume_times": pa.array(np.zeros(n, np.int32)),
        "prepared_transaction_offset": pa.array(np.zeros(n, np.int64)),
    }
    return pa.table(cols)


def encode(table: pa.Table) -> Any:
    """The codec's ``encode_batch`` of ``table`` (an EncodedBatch)."""
    from store.format.batch_codec import encode_batch

    return encode_batch(table)


def with_index_keys(b: Any) -> Any:
    """The EncodedBatch ``b`` carrying its records' index keys, as the read tasks ship them
    (store.index.shipped)."""
    from dataclasses import replace

    from store import batch_index_keys

    hashes, counts = batch_index_keys(np.asarray(b.data, np.uint8), b.offsets)
    return replace(b, key_hashes=hashes, key_counts=counts)


def batch_bytes(b: Any) -> np.ndarray:
    """The records of an EncodedBatch, back to back, as one uint8 array."""
    end = int(b.offsets[-1]) + int(b.sizes[-1]) if len(b) else 0
    return b.data[int(b.offsets[0]) if len(b) else 0:end]
