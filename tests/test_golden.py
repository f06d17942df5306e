"""Golden vectors written by RocketMQ's own store code: our codec must produce and read the same
bytes. Every case is discovered from the golden folder (INDEX.json and file names); a case that
cannot be read fails."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from store.codec import CodecConfig, Message, decode_message, encode_message
from store.errors import FieldLimitError, InvalidMessageError
from store.hosts import HostAddress
from store.properties import delete_property
from store.record_json import message_to_json

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def _discovery_root() -> Path:
    # Same rule as the golden_dir fixture; parametrization happens before fixtures exist.
    return Path(os.environ.get("COMMITLOG_GOLDEN_DIR", ROOT.parent / "shared" / "golden"))


def _discover() -> dict[str, list[str]]:
    root = _discovery_root()
    names: set[str] = set()
    index = root / "INDEX.json"
    if index.is_file():
        for entry in json.loads(index.read_text()):
            names.add(entry["case"])
    if root.is_dir():
        for p in root.iterdir():
            for suffix in (".spec.json", ".decoded.jsonl", ".manifest.json", ".bin"):
                if p.name.endswith(suffix):
                    names.add(p.name[: -len(suffix)])
            if p.is_dir() and (p.name.startswith("store_") or p.name.startswith("corrupt_")):
                names.add(p.name)
    store = sorted(n for n in names if n.startswith("store_"))
    corrupt = sorted(n for n in names if n.startswith("corrupt_"))
    encode = sorted(n for n in names if n not in store and n not in corrupt)
    return {"encode": encode, "store": store, "corrupt": corrupt, "decoded": sorted(names)}


CASES = _discover()


def _params(kind: str) -> list[Any]:
    # An empty list would make pytest skip; a sentinel makes the missing folder a failure instead.
    return CASES[kind] or ["<no golden cases found>"]


def _read_json(path: Path) -> Any:
    if not path.is_file():
        pytest.fail(f"golden file {path} is missing")
    return json.loads(path.read_text(encoding="utf-8"))


def _config(overrides: dict[str, Any] | None) -> CodecConfig:
    config = CodecConfig()
    for java, ours in (("maxMessageSize", "max_message_size"),
                       ("autoMessageVersionOnTopicLen", "auto_message_version_on_topic_len"),
                       ("enabledAppendPropCRC", "enabled_append_prop_crc"),
                       ("forceVerifyPropCRC", "force_verify_prop_crc"),
                       ("checkCRCOnRecover", "check_crc_on_recover")):
        if overrides and java in overrides:
            setattr(config, ours, overrides[java])
    return config


def _body(spec: dict[str, Any]) -> bytes:
    if "bodyGen" in spec:
        g = spec["bodyGen"]
        import numpy as np
        i = np.arange(g["length"], dtype=np.int64)
        return ((i * g["mul"] + g["add"]) & 0xFF).astype(np.uint8).tobytes()
    return base64.b64decode(spec.get("body", ""))


def _message(spec: dict[str, Any], written: dict[str, Any] | None, config: CodecConfig) -> Message:
    props = spec.get("propertiesString", "")
    if spec.get("propertiesViaBrokerMap"):
        assert written is not None, "propertiesViaBrokerMap needs the manifest's written string"
        props = written["fields"]["propertiesString"]
        if config.enabled_append_prop_crc:
            props = delete_property(props, "__CRC32#")
    version = spec.get("version", "auto")
    return Message(
        topic=spec["topic"], body=_body(spec), queue_id=spec.get("queueId", 0), flag=spec.get("flag", 0),
        properties=props, sys_flag=spec.get("sysFlag", 0), born_timestamp=spec.get("bornTimestamp", 0),
        born_host=HostAddress.parse(spec["bornHost"]) if "bornHost" in spec else HostAddress("127.0.0.1", 0),
        store_timestamp=spec.get("storeTimestamp", 0),
        store_host=HostAddress.parse(spec["storeHost"]) if "storeHost" in spec else HostAddress("127.0.0.1", 10911),
        reconsume_times=spec.get("reconsumeTimes", 0),
        prepared_transaction_offset=spec.get("preparedTransactionOffset", 0),
        queue_offset=spec.get("queueOffset", 0), physical_offset=spec.get("commitLogOffset", 0),
        version=None if version == "auto" else int(version),
    )


def _encode_case(golden_dir: Path, case: str) -> tuple[dict, dict, CodecConfig]:
    spec = _read_json(golden_dir / f"{case}.spec.json")
    manifest = _read_json(golden_dir / f"{case}.manifest.json")
    config = _config({**manifest.get("config", {}), **spec.get("config", {})})
    assert len(manifest["messages"]) == len(spec["messages"]), "manifest and spec disagree on the message count"
    return spec, manifest, config


@pytest.mark.parametrize("case", _params("encode"))
def test_encoding_each_spec_gives_the_golden_bytes(golden_dir: Path, case: str) -> None:
    spec, manifest, config = _encode_case(golden_dir, case)
    expected = (golden_dir / f"{case}.bin").read_bytes() if (golden_dir / f"{case}.bin").exists() else b""
    built = bytearray(len(expected))
    for mspec, written in zip(spec["messages"], manifest["messages"]):
        if mspec.get("expectReject") or not written.get("written", True):
            with pytest.raises((FieldLimitError, InvalidMessageError)) as exc:
                encode_message(_message(mspec, written, config), config)
            # The refusal names the field, the size and the limit.
            if isinstance(exc.value, FieldLimitError):
                assert exc.value.field in str(exc.value) and str(exc.value.limit) in str(exc.value)
            continue
        record = encode_message(_message(mspec, written, config), config)
        assert len(record) == written["length"]
        assert hashlib.sha256(record).hexdigest() == written["sha256"], f"message {written['index']} differs"
        built[written["offset"]:written["offset"] + len(record)] = record
    assert bytes(built) == expected


@pytest.mark.parametrize("case", _params("encode"))
def test_decoding_each_bin_gives_the_manifest_fields(golden_dir: Path, case: str) -> None:
    spec, manifest, config = _encode_case(golden_dir, case)
    data = (golden_dir / f"{case}.bin").read_bytes() if any(m.get("written", True) for m in manifest["messages"]) \
        else b""
    for written in manifest["messages"]:
        if not written.get("written", True):
            continue
        decoded = decode_message(data, written["offset"])
        record = memoryview(data)[written["offset"]:written["offset"] + decoded.total_size]
        ours = message_to_json(decoded, written["offset"], f"{case}.bin", written["offset"], record, config)
        for key, value in written["fields"].items():
            assert ours.get(key, "<missing>") == value, f"message {written['index']} field {key}"
        assert decoded.msg_id == written["fields"]["msgId"]
        assert decoded.tags == written["fields"]["properties"].get("TAGS")
