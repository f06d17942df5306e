"""Index keys found where a batch is encoded and shipped with it, so that the store's writer only
puts them (RocketMQ finds them on its dispatcher thread, reading each record back from the commit
log; a writer that gets them with the batch leaves that work to the read tasks, many cores, and
keeps only the puts on its own).

The keys are those IndexService.buildIndex takes for each record (store.index.build finds them: its
UNIQ_KEY, then each KEYS token, hashed as Java hashes "topic#key"), found in the record bytes as they
will be written: the store patches only QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP (one per
append, which the writer gives the puts), none of which a key depends on. tests/store/index/test_index_shipped.py
holds an index built from shipped keys byte-identical to one built from the commit log.
"""

from __future__ import annotations

import numpy as np

from store.index.build import record_keys


def batch_index_keys(data: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key hashes int32, key counts int32): the index keys of the records at ``starts`` of ``data``
    (uint8), every key in record order, and how many each record has."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    keys = record_keys(data, starts)
    counts = np.bincount(keys.record, minlength=len(starts)) if len(keys) else np.zeros(len(starts), np.int64)
    return np.ascontiguousarray(keys.key_hash, dtype=np.int32), counts.astype(np.int32)
