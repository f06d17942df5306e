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

from store.errors import FieldLimitError, InvalidMessageError
from store.format.codec import CodecConfig, Message, decode_message, encode_message
from store.format.hosts import HostAddress
from store.format.properties import delete_property
from store.format.record_json import message_to_json

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def _discovery_root() -> Path:
    # Same rule as the golden_dir fixture; parametrization happens before fixtures exist.
    return Path(os.environ.get("COMMITLOG_GOLDEN_DIR", ROOT.parent / "shared" / "golden"))


def _discover() -> dict[str, list[str]]:
    root = _discovery_root()
    names: set[str] = set()
    reports: set[str] = set()
    index = root / "INDEX.json"
    if index.is_file():
        for entry in json.loads(index.read_text()):
            names.add(entry["case"])
            if any(f.endswith(".decoded.jsonl") for f in entry.get("files", [])):
                reports.add(entry["case"])
    if root.is_dir():
        for p in root.iterdir():
            for suffix in (".spec.json", ".decoded.jsonl", ".manifest.json", ".bin"):
                if p.name.endswith(suffix):
                    names.add(p.name[: -len(suffix)])
            if p.name.endswith(".decoded.jsonl"):
                reports.add(p.name[: -len(".decoded.jsonl")])
            if p.is_dir() and (p.name.startswith("store_") or p.name.startswith("corrupt_")):
                names.add(p.name)
    # store_*_index folders hold IndexFile vectors over another store (tests/store/index/test_index_golden.py)
    index = sorted(n for n in names if n.startswith("store_") and n.endswith("_index"))
    store = sorted(n for n in names if n.startswith("store_") and n not in index)
    corrupt = sorted(n for n in names if n.startswith("corrupt_"))
    encode = sorted(n for n in names if n not in store and n not in corrupt and n not in index)
    return {"encode": encode, "store": store, "corrupt": corrupt, "index": index, "decoded": sorted(reports)}


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


# --- commit log stores, corrupted copies, and the decoded.jsonl reports ---------------------------

def _segments(store: Path) -> list[Path]:
    d = store / "commitlog"
    if not d.is_dir():
        pytest.fail(f"golden store {store} has no commitlog/ directory")
    return sorted(p for p in d.iterdir() if p.is_file())


def _scan_store(store: Path, config: CodecConfig | None = None) -> tuple[list, list]:
    """Every record of the commit log through scan_segment, segment by segment."""
    from store.scan.record_check import scan_segment
    checks, datas = [], {}
    for seg in _segments(store):
        data = seg.read_bytes()
        base = int(seg.name)
        datas[base] = data
        checks.extend(scan_segment(data, base, len(data), config))
    return checks, datas


@pytest.mark.parametrize("case", _params("store"))
def test_reading_each_store_gives_every_record_and_blank_of_its_manifest(golden_dir: Path, case: str) -> None:
    store = golden_dir / case
    manifest = _read_json(store / "manifest.json")
    checks, datas = _scan_store(store, _config(manifest.get("config")))
    seg_size = manifest["commitLogFileSize"]
    found = [(c.kind, c.offset, c.size) for c in checks if c.kind in ("message", "blank")]
    expected = [(r["type"], r["offset"], r["length"]) for r in manifest["records"]]
    assert found == expected
    assert checks[-1].kind == "end" and checks[-1].offset == manifest["commitLogEndOffset"]
    assert not [c for c in checks if c.kind == "error"]
    for r in manifest["records"]:
        base = r["offset"] - r["segmentPos"]
        assert base % seg_size == 0 and f"{base:020d}" == r["segment"]
        raw = datas[base][r["segmentPos"]:r["segmentPos"] + r["length"]]
        if r["type"] == "message":
            assert hashlib.sha256(raw).hexdigest() == r["sha256"]
            decoded = decode_message(raw)
            assert decoded.msg_id == r["msgId"]
            assert (decoded.topic, decoded.queue_id, decoded.queue_offset) == \
                (r["topic"], r["queueId"], r["queueOffsetWritten"])
        elif "sha256" in r:
            assert hashlib.sha256(raw).hexdigest() == r["sha256"]


@pytest.mark.parametrize("case", _params("store"))
def test_each_store_consume_queue_holds_the_manifest_units(golden_dir: Path, case: str) -> None:
    # Read raw per FORMAT §12 (20-byte big-endian units); the queue developer tests ConsumeQueueStore.
    import struct
    store = golden_dir / case
    manifest = _read_json(store / "manifest.json")
    records = {r["offset"]: r for r in manifest["records"] if r["type"] == "message"}
    assert manifest["consumeQueues"], "the store sample has consume queues"
    for cq in manifest["consumeQueues"]:
        for e in cq["entries"]:
            raw = (store / cq["dir"] / e["file"]).read_bytes()[e["pos"]:e["pos"] + 20]
            assert raw.hex() == e["hex"]
            phys, size, tags = struct.unpack(">qiq", raw)
            assert (phys, size, tags) == (e["commitLogOffset"], e["size"], e["tagsCode"])
            if e.get("kind", "unit") == "unit":
                r = records[phys]
                assert r["length"] == size
                topic, qid = cq["dir"].split("/")[-2:]
                assert (r["topic"], r["queueId"], r["queueOffsetWritten"]) == (topic, int(qid), e["cqOffset"])


def _expected_report(golden_dir: Path, case: str) -> list[dict]:
    path = golden_dir / f"{case}.decoded.jsonl"
    if not path.is_file():
        pytest.fail(f"golden report {path} is missing")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _case_config(golden_dir: Path, case: str) -> CodecConfig:
    """The MessageStoreConfig the case was written with (manifest, then spec overrides)."""
    overrides: dict[str, Any] = {}
    for path in (golden_dir / f"{case}.manifest.json", golden_dir / case / "manifest.json",
                 golden_dir / f"{case}.spec.json"):
        if path.is_file():
            overrides.update(json.loads(path.read_text(encoding="utf-8")).get("config", {}))
    return _config(overrides)


def _report_inputs(golden_dir: Path, case: str) -> list[Path]:
    if (golden_dir / case).is_dir():
        return _segments(golden_dir / case)
    if not (golden_dir / f"{case}.bin").is_file():
        pytest.fail(f"golden case {case} has neither {case}.bin nor a {case}/ store")
    return [golden_dir / f"{case}.bin"]


@pytest.mark.parametrize("case", _params("corrupt"))
def test_reading_each_corrupt_copy_reports_exactly_its_errors(golden_dir: Path, case: str) -> None:
    from store.scan.record_check import scan_segment
    from store.tools.dump import decode_segment_files
    expected = [(e["offset"], e["kind"]) for e in _expected_report(golden_dir, case) if e["type"] == "error"]
    assert expected, "a corrupt sample reports errors"
    reported = [(e["offset"], e["kind"]) for e in decode_segment_files(_report_inputs(golden_dir, case))
                if e["type"] == "error"]
    assert reported == expected
    # recovery's scan stops at the first of them
    first_error = None
    for seg in _segments(golden_dir / case):
        data = seg.read_bytes()
        stop = list(scan_segment(data, int(seg.name), len(data)))[-1]
        if stop.kind == "error":
            first_error = (stop.offset, stop.error_kind)
            break
    assert first_error == expected[0]


@pytest.mark.parametrize("case", _params("decoded"))
def test_decode_segment_files_equals_each_decoded_jsonl(golden_dir: Path, case: str) -> None:
    from store.tools.dump import decode_segment_files
    expected = _expected_report(golden_dir, case)
    ours = list(decode_segment_files(_report_inputs(golden_dir, case), _case_config(golden_dir, case)))
    # same objects, same key order, same lines
    dump = lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    assert [dump(o) for o in ours] == [dump(o) for o in expected]


def test_the_golden_folder_has_cases_and_every_indexed_file(golden_dir: Path) -> None:
    index = _read_json(golden_dir / "INDEX.json")
    assert index and CASES["encode"], f"no golden cases found in {golden_dir}"
    for entry in index:
        for name in entry.get("files", []):
            assert (golden_dir / name.rstrip("/")).exists(), f"{entry['case']}: {name} is missing"
