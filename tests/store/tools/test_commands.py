"""The store commands read the golden stores exactly as RocketMQ's own decoder and manifests do."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import jsonl, run

from store.tools.progress import Progress
from tests.helpers.stores import golden_stores

pytestmark = pytest.mark.unit


def golden_corrupt(golden_dir: Path) -> list[Path]:
    found = sorted(p for p in golden_dir.glob("corrupt_*") if p.is_dir())
    assert found, f"no golden corrupt_* folders in {golden_dir}"
    return found


def test_dump_json_of_a_golden_store_is_the_reference_decoding(golden_dir: Path) -> None:
    for store in golden_stores(golden_dir):
        rc, out, _ = run("dump", str(store), "--json")
        assert rc == 0
        assert jsonl(out) == jsonl((golden_dir / f"{store.name}.decoded.jsonl").read_text())


def test_dump_json_of_a_corrupted_copy_reports_exactly_the_reference_errors(golden_dir: Path) -> None:
    for case in golden_corrupt(golden_dir):
        expected = jsonl((golden_dir / f"{case.name}.decoded.jsonl").read_text())
        rc, out, _ = run("dump", str(case / "commitlog"), "--json")
        got = jsonl(out)
        assert [o for o in got if o["type"] == "error"] == [o for o in expected if o["type"] == "error"]
        assert got == expected


def test_verify_reports_the_reference_errors_of_a_corrupted_copy(golden_dir: Path) -> None:
    for case in golden_corrupt(golden_dir):
        expected = [(o["offset"], o["kind"]) for o in jsonl((golden_dir / f"{case.name}.decoded.jsonl").read_text())
                    if o["type"] == "error"]
        assert expected, f"{case.name} has no errors to find"
        rc, out, _ = run("verify", str(case / "commitlog"), "--json")
        report = json.loads(out)
        assert rc == 1
        assert [(p["offset"], p["kind"]) for p in report["problems"]] == expected


def test_verify_finds_a_golden_store_clean_and_reads_all_of_it(golden_dir: Path) -> None:
    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        rc, out, _ = run("verify", str(store), "--json")
        report = json.loads(out)
        assert (rc, report["problems"]) == (0, [])
        messages = [r for r in manifest["records"] if r["type"] == "message"]
        units = [e for q in manifest["consumeQueues"] for e in q["entries"] if e["kind"] == "unit"]
        assert report["messages"] == len(messages)
        assert report["blanks"] == sum(r["type"] == "blank" for r in manifest["records"])
        assert report["units_checked"] == len(units)
        assert report["data_end"] == manifest["commitLogEndOffset"]
        rc, out, _ = run("verify", str(store))
        assert rc == 0 and ": OK" in out


def test_stat_gives_the_manifest_s_segments_offsets_queues_and_checkpoint(golden_dir: Path) -> None:
    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        rc, out, _ = run("stat", str(store), "--json")
        st = json.loads(out)
        assert rc == 0
        assert ["commitlog/" + s["name"] for s in st["segments"]] == manifest["segments"]
        assert all(s["size"] == manifest["commitLogFileSize"] for s in st["segments"])
        assert st["min_offset"] == manifest["startOffset"]
        assert st["max_offset"] == manifest["commitLogEndOffset"]
        assert [s["closed"] for s in st["segments"]] == [True] * (len(st["segments"]) - 1) + [False]
        queues = {(q["topic"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in st["queues"]}
        expected = {}
        for q in manifest["consumeQueues"]:
            _, topic, qid = q["dir"].split("/")
            offs = [e["cqOffset"] for e in q["entries"] if e["kind"] == "unit"]
            expected[(topic, int(qid))] = (min(offs), max(offs) + 1)
        assert queues == expected
        ck = manifest["checkpoint"]
        assert st["checkpoint"] == {k.split("@")[0]: v for k, v in ck.items() if "@" in k}
        rc, out, _ = run("stat", str(store))
        assert rc == 0 and "TopicA" in out and "confirmPhyOffset" in out
        rc, out, _ = run("stat", str(store), "--json", "--full")
        full = json.loads(out)
        assert sum(s["messages"] for s in full["segments"]) == sum(r["type"] == "message" for r in manifest["records"])
        assert [s["used"] for s in full["segments"]] == [s["used"] for s in st["segments"]]


def test_get_finds_every_manifest_record_by_offset_msg_id_and_queue_position(golden_dir: Path) -> None:
    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        decoded = {o["offset"]: o for o in jsonl((golden_dir / f"{store.name}.decoded.jsonl").read_text())
                   if o["type"] == "message"}
        for r in (r for r in manifest["records"] if r["type"] == "message"):
            rc, out, _ = run("get", str(store), "--offset", str(r["offset"]))
            assert rc == 0 and json.loads(out) == decoded[r["offset"]]
            rc, out, _ = run("get", str(store), "--msg-id", r["msgId"], "--json")
            assert rc == 0 and json.loads(out)["offset"] == r["offset"]
        for q in manifest["consumeQueues"]:
            _, topic, qid = q["dir"].split("/")
            for e in (e for e in q["entries"] if e["kind"] == "unit"):
                rc, out, _ = run("get", str(store), "--topic", topic, "--queue", qid,
                                 "--queue-offset", str(e["cqOffset"]), "--json")
                got = json.loads(out)
                assert rc == 0 and got["offset"] == e["commitLogOffset"] and "problem" not in got
                assert got["consumeQueueUnit"]["tagsCode"] == e["tagsCode"]


def test_get_of_what_is_not_a_message_fails_with_a_reason(golden_dir: Path) -> None:
    store = golden_stores(golden_dir)[0]
    rc, _, err = run("get", str(store), "--offset", "5")
    assert rc == 2 and "no message starts at offset 5" in err
    rc, _, err = run("get", str(store), "--topic", "TopicA", "--queue", "0", "--queue-offset", "999")
    assert rc == 2 and "999 is not among them" in err
    rc, _, err = run("get", str(store), "--msg-id", "XYZ")
    assert rc == 2 and "msgId" in err
    rc, _, err = run("get", str(store / "nowhere"), "--offset", "0")
    assert rc == 2 and "does not exist" in err


def test_dump_text_filters_and_starting_points(golden_dir: Path) -> None:
    store = golden_stores(golden_dir)[0]
    reference = [o for o in jsonl((golden_dir / f"{store.name}.decoded.jsonl").read_text()) if o["type"] == "message"]
    rc, out, _ = run("dump", str(store))
    lines = out.splitlines()
    assert rc == 0
    assert sum(" MESSAGE " in ln for ln in lines) == len(reference)
    assert lines[-1].startswith(f"# {len(reference)} messages")
    topic = reference[0]["topic"]
    rc, out, _ = run("dump", str(store), "--topic", topic, "--queue", "0", "--limit", "2", "--json")
    got = jsonl(out)
    want = [o for o in reference if o["topic"] == topic and o["queueId"] == 0][:2]
    assert got == want
    middle = reference[len(reference) // 2]["offset"]
    rc, out, _ = run("dump", str(store), "--from", str(middle), "--json")
    assert [o["offset"] for o in jsonl(out) if o["type"] == "message"] == \
        [o["offset"] for o in reference if o["offset"] >= middle]
    # an offset inside a record starts at the next record
    rc, out, _ = run("dump", str(store), "--from", str(middle - 1), "--json", "--limit", "1")
    assert [o["offset"] for o in jsonl(out)] == [middle]


def test_dump_of_one_segment_file_takes_its_offset_from_the_name_or_base(golden_dir: Path, tmp_path: Path) -> None:
    store = golden_stores(golden_dir)[0]
    seg = sorted((store / "commitlog").iterdir())[1]
    rc, out, _ = run("dump", str(seg), "--json")
    first = jsonl(out)[0]
    assert rc == 0 and first["offset"] == int(seg.name) and first["physicalOffsetMatchesPosition"]
    loose = tmp_path / "segment.bin"
    shutil.copy(seg, loose)
    rc, out, _ = run("dump", str(loose), "--json")
    assert [o for o in jsonl(out) if o["type"] == "error"] == []      # start unknown: offsets not checked
    assert jsonl(out)[0]["offset"] == 0
    rc, out, _ = run("dump", str(loose), "--json", "--base", seg.name)
    assert jsonl(out)[0]["offset"] == int(seg.name)
    rc, out, _ = run("dump", str(loose), "--json", "--base", "7")
    assert jsonl(out)[0]["type"] == "error" and jsonl(out)[0]["kind"] == "physicalOffset"


def test_clean_dry_run_deletes_nothing_and_clean_deletes_expired_segments(golden_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(golden_stores(golden_dir)[0], store)
    for p in store.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    old = 1_000_000_000
    for seg in (store / "commitlog").iterdir():
        os.utime(seg, (old, old))
    before = sorted(p.name for p in (store / "commitlog").iterdir())
    rc, out, _ = run("clean", str(store), "--dry-run", "--now", "--json")
    plan = json.loads(out)
    assert rc == 0 and plan["dryRun"]
    assert [Path(s["path"]).name for s in plan["segments"]] == before[:-1]
    assert sorted(p.name for p in (store / "commitlog").iterdir()) == before
    rc, out, _ = run("clean", str(store), "--now")
    assert rc == 0 and "deleted segment" in out
    assert sorted(p.name for p in (store / "commitlog").iterdir()) == before[-1:]
    rc, out, _ = run("verify", str(store), "--json")
    assert rc == 0, out


def test_clean_refuses_while_a_writer_holds_the_store(golden_dir: Path, tmp_path: Path) -> None:
    from store.log.lock import StoreLock

    store = tmp_path / "store"
    shutil.copytree(golden_stores(golden_dir)[0], store)
    os.chmod(store, 0o755)
    lock = StoreLock(store)
    lock.acquire()
    try:
        rc, _, err = run("clean", str(store), "--now")
        assert rc == 2 and "locked" in err
        rc, _, _ = run("clean", str(store), "--now", "--dry-run")
        assert rc == 0
    finally:
        lock.release()


def test_the_progress_bar_is_drawn_only_on_a_terminal() -> None:
    quiet = io.StringIO()
    p = Progress(100, "verify", stream=quiet)
    p.update(50, force=True)
    p.close()
    assert quiet.getvalue() == ""
    tty = io.StringIO()
    p = Progress(100, "verify", stream=tty, enabled=True)
    p.update(50, force=True)
    p.close()
    assert "50.0%" in tty.getvalue()


def test_commands_tell_a_running_writers_uncommitted_batch_from_its_committed_data(tmp_path: Path) -> None:
    """While a writer runs, its appended but uncommitted batch is past the commit point: verify,
    dump and stat show it as such (store.read.past_commit), ``get`` by queue offset does not serve it."""
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    root = tmp_path / "store"
    msgs = [Message(topic=f"T{i % 2}", body=bytes([i % 251]) * 100, queue_id=i % 3,
                    properties=f"TAGS\x01t{i % 5}\x02") for i in range(600)]
    with MessageStore.open(root, StoreConfig(segment_size=64 * 1024, consume_queue_units=50)) as store:
        store.append(msgs[:400])
        committed = store.commit().offset
        store.append(msgs[400:])
        store.flush()
        rc, out, _ = run("verify", str(root), "--json")
        report = json.loads(out)
        assert (rc, report["problems"]) == (0, [])
        assert report["messages"] == 400 and report["past_commit_messages"] == 200
        assert report["units_checked"] == 600 and report["committed_offset"] == committed < report["data_end"]
        rc, out, _ = run("dump", str(root), "--json")
        shown = [o for o in jsonl(out) if o["type"] == "message"]
        assert len(shown) == 600
        assert [o["offset"] < committed for o in shown] == [True] * 400 + [False] * 200
        assert [o.get("pastCommitPoint", False) for o in shown] == [False] * 400 + [True] * 200
        rc, out, _ = run("stat", str(root), "--json")
        st = json.loads(out)
        assert st["committed_offset"] == committed and st["past_commit"]["messages"] == 200
        assert sum(q["depth"] for q in st["queues"]) == 400
        rc, _, err = run("get", str(root), "--topic", "T0", "--queue", "0", "--queue-offset", "80")
        assert rc == 2 and "not committed" in err
        rc, _, err = run("get", str(root), "--topic", "T0", "--queue", "0", "--queue-offset", "100")
        assert rc == 2 and "not among them" in err
        rc, out, _ = run("get", str(root), "--topic", "T0", "--queue", "0", "--queue-offset", "5", "--json")
        assert rc == 0 and json.loads(out)["queueOffset"] == 5


def test_dump_lists_exactly_the_manifest_s_records(golden_dir: Path) -> None:
    import hashlib

    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        rc, out, _ = run("dump", str(store), "--json")
        got = [o for o in jsonl(out) if o["type"] in ("message", "blank")]
        assert [(o["type"], o["offset"], o["segment"], o["segmentPos"], o["totalSize"]) for o in got] == \
            [(r["type"], r["offset"], r["segment"], r["segmentPos"], r["length"]) for r in manifest["records"]]
        for o, r in zip(got, manifest["records"]):
            if r["type"] == "message":
                assert (o["msgId"], o["topic"], o["queueId"], o["queueOffset"]) == \
                    (r["msgId"], r["topic"], r["queueId"], r["queueOffsetWritten"])
                raw = (store / "commitlog" / r["segment"]).read_bytes()[r["segmentPos"]:r["segmentPos"] + r["length"]]
                assert hashlib.sha256(raw).hexdigest() == r["sha256"]


def test_dump_json_of_every_golden_record_file_is_the_reference_decoding(golden_dir: Path) -> None:
    cases = sorted(golden_dir.glob("*.bin"))
    assert cases, f"no golden *.bin files in {golden_dir}"
    for case in cases:
        rc, out, _ = run("dump", str(case), "--json")
        assert (case.name, rc, jsonl(out)) == (case.name, 0, jsonl(case.with_suffix(".decoded.jsonl").read_text()))


def test_verify_accepts_every_golden_record_file(golden_dir: Path) -> None:
    cases = sorted(golden_dir.glob("*.bin"))
    assert cases, f"no golden *.bin files in {golden_dir}"
    for case in cases:
        manifest = json.loads(case.with_suffix(".manifest.json").read_text())
        rc, out, _ = run("verify", str(case), "--json")
        report = json.loads(out)
        assert (case.name, rc, report["problems"]) == (case.name, 0, [])
        assert report["messages"] == len(manifest["messages"])


def test_dump_json_of_each_vector_file_is_its_reference_decoding(golden_dir: Path) -> None:
    # compared as JSON objects (golden README); a vector with every message refused is an empty .bin
    vectors = sorted(p for p in golden_dir.glob("*.bin") if (golden_dir / f"{p.stem}.decoded.jsonl").is_file())
    assert vectors, f"no golden *.bin with a *.decoded.jsonl in {golden_dir}"
    for vector in vectors:
        rc, out, err = run("dump", str(vector), "--json")
        expected = jsonl((golden_dir / f"{vector.stem}.decoded.jsonl").read_text())
        assert jsonl(out) == expected, vector.name
        assert rc == (1 if expected[-1]["errors"] else 0), (vector.name, err)


def test_dump_of_an_empty_vector_file_is_zero_messages_with_its_eof_and_summary(tmp_path: Path) -> None:
    # a golden vector whose every message was refused (expectReject) has nothing in its .bin
    from store.tools.dump import decode_segment_files
    empty = tmp_path / "p99_all_rejected.bin"
    empty.write_bytes(b"")
    rc, out, err = run("dump", str(empty), "--json")
    assert (rc, err) == (0, "")
    assert jsonl(out) == [
        {"type": "eof", "offset": 0, "segment": empty.name},
        {"type": "summary", "files": [empty.name], "fileBytes": 0, "messages": 0, "messageBytes": 0, "blanks": 0,
         "blankBytes": 0, "crcErrors": 0, "magicErrors": 0, "errors": [], "rocketmqRecoveryStopsAt": 0}]
    assert jsonl(out) == list(decode_segment_files([empty]))
    rc, out, err = run("dump", str(empty))
    assert (rc, err) == (0, "")
    assert out.splitlines()[-1] == "# 0 messages, 0 blanks, 0 errors, valid data ends at 0"


def test_an_empty_segment_inside_a_store_stays_damage(golden_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(golden_stores(golden_dir)[0], store)
    segments = sorted((store / "commitlog").iterdir())
    os.chmod(segments[1], 0o644)
    segments[1].write_bytes(b"")
    rc, out, err = run("dump", str(store), "--json")
    assert rc == 1 and "segmentSize" in err
    assert {"offset": int(segments[1].name), "kind": "segmentSize"}.items() <= \
        [o for o in jsonl(out) if o["type"] == "error"][0].items()
