"""Stores written by earlier releases outlive them (issue 56, part 3).

Each of tests/fixtures/compat/<version>/store.tar.gz holds a store, the export files it was replayed
from and run.json (tests/fixtures/compat/build_fixture.py wrote it with that release's own
``commitlog replay``, stopped at ``bound``). Today's code must verify it clean, read it back, find
its messages by key, and resume it: a replay of the same files grown by new records stores exactly
the records past the bound, once. A commit point of a version this release does not know is
refused in one line naming the version, never read as ours.
"""

from __future__ import annotations

import base64
import json
import tarfile
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.encode.restore import kafka_value
from sink import read_dead_letters
from store import StoreReader
from tests.helpers.cli import jsonl, run
from tests.fixtures.compat.build_fixture import write_export
from tests.helpers.brokers.kafka_records import store_by_coordinates

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "compat"
VERSIONS = sorted(p.parent.name for p in FIXTURES.glob("*/store.tar.gz"))
GROWN = {0: 35, 1: 25}          # the export after the release stopped: new records in both partitions


def unpack(version: str, into: Path) -> dict:
    """The fixture's store and export under ``into``; its run.json, with partitions as ints, and
    ``committed``: the next Kafka offset of each partition as its commit point says."""
    with tarfile.open(FIXTURES / version / "store.tar.gz") as tar:
        tar.extractall(into, filter="data")
    run_doc = json.loads((into / "run.json").read_text())
    for name in ("rows", "bound"):
        run_doc[name] = {int(p): n for p, n in run_doc[name].items()}
    sink = json.loads((into / "store" / "commitpoint.json").read_text())["metadata"]["sink"]
    run_doc["committed"] = {int(k.rpartition("/")[2]): n for k, n in sink["kafkaOffsets"].items()}
    return run_doc


def expected(ends: dict[int, int], dead: tuple[int, int]) -> list[tuple[str, int, int]]:
    return sorted(("orders", p, o) for p, n in ends.items() for o in range(n) if (p, o) != dead)


@pytest.mark.unit
def test_the_fixtures_cover_every_release_and_today() -> None:
    assert {"v0.1.0", "v0.2.0", "v0.3.0"} <= set(VERSIONS) and any(v.endswith("-dev") for v in VERSIONS), VERSIONS
    for version in VERSIONS:
        assert (FIXTURES / version / "store.tar.gz").stat().st_size < 64 * 1024
        assert (FIXTURES / version / "README.md").exists(), version


@pytest.mark.unit
@pytest.mark.parametrize("version", VERSIONS)
def test_a_store_of_each_release_verifies_reads_back_and_answers_get_by_key(version: str, tmp_path: Path) -> None:
    fx = unpack(version, tmp_path)
    store, dead = tmp_path / "store", tuple(fx["dead"])
    if not version.endswith("-dev"):     # the tagged release itself
        assert fx["revision"].startswith(f"{version.split('-')[0]}-0-g"), fx["revision"]
    if fx.get("killed_at_commit"):       # killed mid-batch: committed less than its bound
        assert all(fx["committed"][p] <= fx["bound"][p] for p in fx["bound"]) and fx["committed"] != fx["bound"]
    else:
        assert fx["committed"] == fx["bound"]

    rc, out, err = run("verify", str(store))
    assert rc == 0 and "OK" in out and "problem" not in out.lower(), out + err

    found = store_by_coordinates(str(store))
    assert sorted(found) == expected(fx["committed"], dead)
    assert all(len(msgs) == 1 for msgs in found.values())
    [(_, msg)] = found[("orders", 1, 5)]
    assert (msg.body, msg.properties["KEYS"], msg.properties["trace"]) == (b"v1-5", "k1-5", "t5")
    with StoreReader.open(store) as reader:        # the Arrow read-back the Spark source serves
        table = pa.Table.from_batches(list(reader.record_batches(check_crc=True)))
    assert set(table.column("topic").to_pylist()) == {"orders"}
    assert sorted(table.column("keys").to_pylist()) == sorted(f"k{p}-{o}" for _, p, o in expected(fx["committed"], dead))
    [(_, tomb)], [(_, empty)] = found[("orders", *fx["tombstone"])], found[("orders", *fx["empty"])]
    # v0.1.0 stored a tombstone as an empty value (CHANGELOG.md): it cannot be told apart, and reads as one
    tombstone = b"" if version == "v0.1.0" else None
    assert (kafka_value(tomb.body, tomb.properties), kafka_value(empty.body, empty.properties)) == (tombstone, b"")

    if not (store / "index").exists():      # before v0.2.0: no index/, and get --key says how to build one
        rc, out, err = run("get", str(store), "--topic", "orders", "--key", "k0-9")
        assert rc == 2 and err.strip() == f"commitlog get: {store} has no index/: build it with `commitlog reindex {store}`"
        rc, out, err = run("reindex", str(store))
        assert rc == 0, out + err
    rc, out, err = run("get", str(store), "--topic", "orders", "--key", "k0-9", "--json")
    [hit] = [m for m in jsonl(out) if m.get("type") == "message"]
    assert rc == 0 and base64.b64decode(hit["bodyBase64"]) == b"v0-9", out + err
    rc, out, _ = run("get", str(store), "--topic", "orders", "--key", f"k{dead[0]}-{dead[1]}", "--json")
    assert not [m for m in jsonl(out) if m.get("type") == "message"], "a dead letter is no message"
    # the first record past the commit point: never written, or (killed mid-batch) written but not committed
    rc, out, _ = run("get", str(store), "--topic", "orders", "--key", f"k0-{fx['committed'][0]}", "--json")
    assert not [m for m in jsonl(out) if m.get("type") == "message"], out

    [letter] = read_dead_letters(store)
    assert (letter["partition"], letter["offset"]) == dead and "over the limit of 16384" in letter["reason"]


@pytest.mark.integration
@pytest.mark.parametrize("version", VERSIONS)
def test_a_replay_resumes_a_store_of_each_release_where_it_stopped(
        version: str, spark: object, tmp_path: Path) -> None:
    from ingest.cli import build_parser
    from ingest.replay.cli import job_config_from_args, options_from_args
    from ingest.replay.command import replay

    fx = unpack(version, tmp_path)
    store, export, dead = tmp_path / "store", tmp_path / "export", tuple(fx["dead"])
    write_export(export, {p: range(n) for p, n in GROWN.items()})     # the same rows, then new ones
    # the release's own settings, the bound dropped: replay everything the files hold
    argv = [a.replace(fx["command"][fx["command"].index("--store") + 1], str(store))
             .replace(fx["command"][fx["command"].index("--from-files") + 1], str(export))
            for a in fx["command"][fx["command"].index("replay"):fx["command"].index("--to-offsets")]]
    args = build_parser().parse_args(argv)
    opts = options_from_args(args)
    cfg = job_config_from_args(args, opts)
    cfg.master = None

    summary = replay(cfg, opts, spark=spark)

    new = len(expected(GROWN, dead)) - len(expected(fx["committed"], dead))
    dead_new = int(dead[1] >= fx["committed"][dead[0]])
    assert summary.complete and summary.verified is True
    assert (summary.records, summary.dead_letters) == (new, dead_new), "\n".join(summary.lines())
    found = store_by_coordinates(str(store))
    assert sorted(found) == expected(GROWN, dead)
    assert all(len(msgs) == 1 for msgs in found.values()), "stored twice"
    assert len(read_dead_letters(store)) == 1
    rc, out, err = run("verify", str(store))
    assert rc == 0 and "OK" in out, out + err

    again = replay(cfg, opts, spark=spark)
    assert (again.records, again.dead_letters) == (0, 0)


def with_version(store: Path, version: object, sink: bool = False) -> None:
    """commitpoint.json as a release writing ``version`` would leave it (its fields otherwise ours)."""
    path = store / "commitpoint.json"
    doc = json.loads(path.read_text())
    (doc["metadata"]["sink"] if sink else doc)["version"] = version
    path.write_text(json.dumps(doc))


@pytest.mark.unit
@pytest.mark.parametrize("command", ["verify", "get", "dump", "replay"])
def test_a_commit_point_of_a_future_version_is_refused_in_one_line_naming_it(command: str, tmp_path: Path) -> None:
    fx = unpack(VERSIONS[-1], tmp_path)
    store = str(tmp_path / "store")
    with_version(tmp_path / "store", 2)
    before = (tmp_path / "store" / "commitpoint.json").read_bytes()
    argv = {"verify": [store], "dump": [store], "get": [store, "--topic", "orders", "--key", "k0-3"],
            "replay": ["--from-files", str(tmp_path / "export"), "--store", store,
                       *fx["command"][fx["command"].index("--segment-size"):fx["command"].index("--to-offsets")]]}

    rc, out, err = run(command, *argv[command])

    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "version 2" in lines[0] and "reads version 1 only" in lines[0], err
    assert "Traceback" not in err and not out.strip()
    assert (tmp_path / "store" / "commitpoint.json").read_bytes() == before


@pytest.mark.unit
def test_a_writer_refuses_a_sink_state_of_a_future_version(tmp_path: Path) -> None:
    from sink.state import SinkState
    from store import CommitPointError, read_commit_point

    unpack(VERSIONS[-1], tmp_path)
    with_version(tmp_path / "store", 3, sink=True)

    with pytest.raises(CommitPointError, match=r"metadata.sink has version 3, and this release reads versions 1, 2 only"):
        SinkState.from_metadata(read_commit_point(tmp_path / "store").metadata)
