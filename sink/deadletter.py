"""The dead-letter file: records that could not become RocketMQ messages, with the reason (its text
and its store.DeadLetterReason code) and the raw record. Exactly once like the commit log: its
committed length rides in each commit, and opening cuts away whatever a crashed batch appended after it."""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path

import pyarrow as pa

from store import DeadLetterReason

log = logging.getLogger(__name__)

DEAD_LETTER_DIR = "deadletter"
DEAD_LETTER_FILE = "deadletter.jsonl"


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


class DeadLetterLog:
    """Append-only JSON lines under ``<store>/deadletter/``."""

    def __init__(self, store_root: str | os.PathLike[str], committed_bytes: int) -> None:
        self.path = Path(store_root) / DEAD_LETTER_DIR / DEAD_LETTER_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # never through a link: the file is truncated to its committed length below
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        size = os.fstat(self._fd).st_size
        if size > committed_bytes:
            log.warning("dead letters: dropping %d uncommitted bytes after %d in %s",
                        size - committed_bytes, committed_bytes, self.path)
            os.ftruncate(self._fd, committed_bytes)
            os.fsync(self._fd)
        elif size < committed_bytes:
            raise OSError(f"dead-letter file {self.path} is {size} bytes but {committed_bytes} were "
                          f"committed: it was truncated or replaced outside the job")
        self.size = committed_bytes

    def append(self, dead: pa.Table, batch_id: int) -> int:
        """Append the dead rows of a batch, fsync, return the new size (to commit)."""
        if dead.num_rows == 0:
            return self.size
        rows = dead.select(["kafka_topic", "kafka_partition", "kafka_offset", "raw_timestamp",
                            "dead_reason", "dead_code", "raw_key", "raw_value", "raw_headers"]).to_pylist()
        lines = []
        for r in rows:
            lines.append(json.dumps({
                "topic": r["kafka_topic"], "partition": r["kafka_partition"], "offset": r["kafka_offset"],
                "timestampUs": r["raw_timestamp"], "reason": r["dead_reason"],
                "reasonCode": r["dead_code"] or DeadLetterReason.OTHER.value, "batchId": batch_id,
                "keyBase64": _b64(r["raw_key"]), "valueBase64": _b64(r["raw_value"]),
                "headers": [None if h is None else {"key": h["key"], "valueBase64": _b64(h["value"])}
                            for h in r["raw_headers"] or []],
            }, ensure_ascii=False))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        os.pwrite(self._fd, data, self.size)
        os.fsync(self._fd)
        self.size += len(data)
        return self.size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_dead_letters(store_root: str | os.PathLike[str]) -> list[dict]:
    """Every dead letter of a store (the committed part is all there is once the writer closed). A
    letter written before reasons had codes has ``reasonCode`` None."""
    path = Path(store_root) / DEAD_LETTER_DIR / DEAD_LETTER_FILE
    if not path.exists():
        return []
    letters = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    for letter in letters:
        letter.setdefault("reasonCode", None)
    return letters
