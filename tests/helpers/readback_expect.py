"""What a store read back (StoreReader.record_batches, the rocketmq-commitlog source) must give for
each golden store: rows built from its reference decoding, ``store_*.decoded.jsonl``."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NO_CASE = "<no golden store with a decoded.jsonl found>"


def golden_root() -> Path:
    return Path(os.environ.get("COMMITLOG_GOLDEN_DIR", ROOT.parent / "shared" / "golden"))


def golden_stores() -> list[str]:
    """Every store_* folder that has a decoded.jsonl beside it; a sentinel when there is none,
    so that an empty or missing folder fails the tests instead of skipping them."""
    root = golden_root()
    found = sorted(p.name for p in root.glob("store_*")
                   if p.is_dir() and (root / f"{p.name}.decoded.jsonl").is_file()) if root.is_dir() else []
    return found or [NO_CASE]


def expected_rows(case: str) -> list[dict[str, Any]]:
    """One dict per message of the reference decoding, in our column names; a body over 64 KiB
    (given by sha256 only) as {"sha256": ...}."""
    assert case != NO_CASE, f"no golden store_* with a decoded.jsonl in {golden_root()}"
    from store.format.hosts import HostAddress

    path = golden_root() / f"{case}.decoded.jsonl"
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        o = json.loads(line) if line.strip() else {}
        if o.get("type") != "message":
            continue
        props = o["properties"]
        body: Any = base64.b64decode(o["bodyBase64"]) if "bodyBase64" in o else {"sha256": o["bodySha256"]}
        rows.append({
            "topic": o["topic"], "queueId": o["queueId"], "queueOffset": o["queueOffset"],
            "physicalOffset": o["physicalOffset"], "storeTimestamp": o["storeTimestamp"],
            "bornTimestamp": o["bornTimestamp"],
            "bornHost": str(HostAddress(o["bornHost"]["ip"], o["bornHost"]["port"])),
            "storeHost": str(HostAddress(o["storeHost"]["ip"], o["storeHost"]["port"])),
            "sysFlag": o["sysFlag"], "flag": o["flag"], "reconsumeTimes": o["reconsumeTimes"],
            "keys": props.get("KEYS"), "tags": props.get("TAGS"), "properties": dict(props), "body": body,
            "kafka_topic": props.get("KAFKA_TOPIC"),
            "kafka_partition": int(props["KAFKA_PARTITION"]) if "KAFKA_PARTITION" in props else None,
            "kafka_offset": int(props["KAFKA_OFFSET"]) if "KAFKA_OFFSET" in props else None,
        })
    assert rows, f"{path} holds no message"
    return rows


def comparable(row: dict[str, Any], big_bodies: bool) -> dict[str, Any]:
    """A row read back, in the form of expected_rows (properties as a dict, bytes bodies)."""
    out = dict(row)
    props = out["properties"]
    out["properties"] = dict(props) if not isinstance(props, dict) else props
    body = bytes(out["body"])
    out["body"] = {"sha256": hashlib.sha256(body).hexdigest()} if big_bodies else body
    return out


def assert_rows_equal(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected), f"{len(got)} rows read back, {len(expected)} in the reference"
    for g, e in zip(got, expected):
        g = comparable(g, isinstance(e["body"], dict))
        assert set(g) == set(e), f"columns differ: {sorted(set(g) ^ set(e))}"
        for k in e:
            assert g[k] == e[k], f"offset {e['physicalOffset']} column {k}: {g[k]!r} != {e[k]!r}"
