"""The geometry index/ was built with (maxHashSlotNum, maxIndexNum), kept beside RocketMQ's own
config files as config/messageIndex.json: an IndexFile's size does not tell its slot and item
counts apart, and index/ itself may hold nothing but IndexFiles. ``complete`` is false once a
writer has appended with the index off: the files then miss messages until `commitlog reindex`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from store.errors import IndexFileError
from store.format.constants import CONFIG_DIR, INDEX_SETTINGS_FILE
from store.index.service import IndexConfig
from store.log.segment import write_atomically


@dataclass(frozen=True)
class IndexSettings:
    max_hash_slot_num: int
    max_index_num: int
    complete: bool = True

    def config(self, enabled: bool = True) -> IndexConfig:
        return IndexConfig(enabled, self.max_hash_slot_num, self.max_index_num)


def settings_path(root: Path) -> Path:
    return Path(root) / CONFIG_DIR / INDEX_SETTINGS_FILE


def read_index_settings(root: Path) -> IndexSettings | None:
    path = settings_path(root)
    try:
        obj = json.loads(path.read_text())
        return IndexSettings(int(obj["maxHashSlotNum"]), int(obj["maxIndexNum"]), bool(obj.get("complete", True)))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        raise IndexFileError(f"{path} is not readable ({e}): remove it and run `commitlog reindex`") from e


def write_index_settings(root: Path, settings: IndexSettings) -> None:
    """Atomically (write, fsync, rename): a crash leaves the old file or the new one."""
    write_atomically(settings_path(root), json.dumps(
        {"maxHashSlotNum": settings.max_hash_slot_num, "maxIndexNum": settings.max_index_num,
         "complete": settings.complete}, indent=1).encode())
