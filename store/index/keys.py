"""Which keys of a message RocketMQ's IndexService indexes (CommitLogDispatcherBuildIndex):
its UNIQ_KEY first, then each non-empty token of KEYS split on a single space; nothing for a
ROLLBACK record."""

from __future__ import annotations

from collections.abc import Mapping

from store.format.constants import (INDEX_KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, TRANSACTION_ROLLBACK_TYPE,
                                    TRANSACTION_TYPE_MASK)


def indexed_keys(properties: Mapping[str, str], sys_flag: int) -> list[str]:
    if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
        return []
    out = []
    uniq = properties.get(PROPERTY_UNIQ_KEY)
    if uniq is not None:
        out.append(uniq)
    keys = properties.get(PROPERTY_KEYS)
    if keys:
        out += keys_tokens(keys)
    return out


def keys_tokens(keys: str) -> list[str]:
    """The tokens of a KEYS value that are indexed: split on a single space, empty ones dropped."""
    return [k for k in keys.split(INDEX_KEY_SEPARATOR) if k]
