"""The key hash of RocketMQ's IndexFile, vectorized: |String.hashCode(topic + "#" + key)|, with
Integer.MIN_VALUE (whose absolute value Java leaves negative) taken as 0."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.format.constants import INDEX_TOPIC_KEY_JOIN

_MASK = np.uint64(0xFFFFFFFF)


def _powers_of_31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i in [0, n), as uint64 (uint32 products wrap as Java's int does)."""
    steps = np.full(max(n, 1), 31, dtype=np.uint32)
    steps[0] = 1
    return np.cumprod(steps, dtype=np.uint32).astype(np.uint64)


def java_string_hashes(texts: Sequence[str]) -> np.ndarray:
    """Java ``String.hashCode`` of every text (over UTF-16 code units, 32-bit wrap), as int32.
    One pass over all code units: each unit weighs 31**(units after it in its text)."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    encoded = [t.encode("utf-16-be", "surrogatepass") for t in texts]
    lengths = np.fromiter((len(e) >> 1 for e in encoded), dtype=np.int64, count=n)
    units = np.frombuffer(b"".join(encoded), dtype=">u2").astype(np.uint64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    after = np.repeat(ends, lengths) - 1 - np.arange(int(ends[-1]), dtype=np.int64)
    weighted = (units * _powers_of_31(int(lengths.max()))[after]) & _MASK
    nonempty = lengths > 0
    sums = np.zeros(n, dtype=np.uint64)
    if nonempty.any():
        sums[nonempty] = np.add.reduceat(weighted, starts[nonempty])
    return (sums & _MASK).astype(np.uint32).view(np.int32)


def index_key_hashes(topics: Sequence[str], keys: Sequence[str]) -> np.ndarray:
    """IndexService's keyHash of each (topic, key): non-negative int32."""
    h = java_string_hashes([f"{t}{INDEX_TOPIC_KEY_JOIN}{k}" for t, k in zip(topics, keys)]).astype(np.int64)
    h = np.abs(h)
    h[h > 0x7FFFFFFF] = 0          # abs(Integer.MIN_VALUE) stays negative in Java: RocketMQ uses 0
    return h.astype(np.int32)
