"""Lookups by key, as RocketMQ answers them: the index gives the offsets whose key hash matches
(IndexService.queryOffset, hash collisions included), then, as mqadmin's queryMsgByKey and
queryMsgByUniqueKey do on the client side, only the messages that really carry the key stay."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from store.format.constants import INDEX_DIR, INDEX_KEY_SEPARATOR, MAX_MSGS_NUM_BATCH, PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from store.index.service import IndexConfig, IndexService
from store.index.settings import read_index_settings

FOREVER_MS = 2**63 - 1


def open_index(root: Path) -> IndexService | None:
    """index/ of a store, read-only, with the geometry it was built with (None: no index)."""
    directory = Path(root) / INDEX_DIR
    if not directory.is_dir():
        return None
    settings = read_index_settings(root)
    config = settings.config() if settings is not None else IndexConfig()
    return IndexService(directory, config, read_only=True)


def carries_key(topic: str, properties: Mapping[str, str], want_topic: str, key: str) -> bool:
    """The message is of ``want_topic`` and ``key`` is one of its KEYS tokens."""
    keys = properties.get(PROPERTY_KEYS) or ""
    return topic == want_topic and key in keys.split(INDEX_KEY_SEPARATOR)


def carries_uniq_key(topic: str, properties: Mapping[str, str], want_topic: str, uniq_key: str) -> bool:
    return topic == want_topic and properties.get(PROPERTY_UNIQ_KEY) == uniq_key


def check_max_num(max_num: int) -> int:
    """The broker answers at most maxMsgsNumBatch (64) offsets per query."""
    if max_num <= 0:
        raise ValueError(f"--max-num {max_num}: must be positive")
    return min(max_num, MAX_MSGS_NUM_BATCH)
