"""The IndexFile against RocketMQ's own: for every `store_*_index` folder of the golden vectors, and
every variant inside it with its own settings.json, the store it names is indexed with those
settings; every index file must equal RocketMQ's byte for byte (in creation order: names are
creation times), and every query of queries.jsonl must return RocketMQ's offsets, hash collisions
included. A case that cannot be read fails; none is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store.tools.reindex import index_commit_log
from store.index.file import IndexHeader
from store.index.service import IndexConfig, IndexService
from store.read.view import open_view

pytestmark = pytest.mark.unit


def index_cases(golden: Path) -> list[Path]:
    """Each folder with a settings.json under a store_*_index folder (the folder itself included)."""
    cases = []
    for top in sorted(golden.glob("store_*_index")):
        cases += sorted(p.parent for p in top.rglob("settings.json"))
    assert cases, f"no store_*_index folder with a settings.json under {golden}"
    return cases


def build(golden: Path, case: Path, tmp: Path) -> IndexService:
    settings = json.loads((case / "settings.json").read_text())
    config = IndexConfig(True, settings["maxHashSlotNum"], settings["maxIndexNum"])
    service = IndexService(tmp / "index", config)
    src = open_view(golden / settings["store"])
    result = index_commit_log(service, src.segments, src.committed_offset)
    assert result.damage is None, f"{case}: the store {settings['store']} is damaged at {result.damage}"
    return service


def test_every_index_file_equals_rocketmqs_byte_for_byte(golden_dir: Path, tmp_path: Path) -> None:
    for i, case in enumerate(index_cases(golden_dir)):
        service = build(golden_dir, case, tmp_path / str(i))
        theirs = json.loads((case / "index_files.json").read_text())["files"]
        ours = [f.path for f in service.files]
        assert len(ours) == len(theirs), f"{case}: {len(ours)} index files, RocketMQ wrote {len(theirs)}"
        for mine, expected in zip(ours, theirs):
            want = (case / "index" / expected["name"]).read_bytes()
            got = mine.read_bytes()
            assert IndexHeader.unpack(got) == IndexHeader(**{
                "begin_timestamp": expected["header"]["beginTimestamp"],
                "end_timestamp": expected["header"]["endTimestamp"],
                "begin_phy_offset": expected["header"]["beginPhyOffset"],
                "end_phy_offset": expected["header"]["endPhyOffset"],
                "hash_slot_count": expected["header"]["hashSlotCount"],
                "index_count": expected["header"]["indexCount"]}), f"{case}: header of {expected['name']}"
            assert got == want, f"{case}: {mine.name} differs from RocketMQ's {expected['name']}"
        service.close()


def test_every_query_returns_rocketmqs_offsets(golden_dir: Path, tmp_path: Path) -> None:
    for i, case in enumerate(index_cases(golden_dir)):
        service = build(golden_dir, case, tmp_path / str(i))
        settings = json.loads((case / "settings.json").read_text())
        limit = settings.get("maxMsgsNumBatch", 64)
        lines = (case / "queries.jsonl").read_text().splitlines()
        assert lines, f"{case}: no queries"
        for line in lines:
            q = json.loads(line)
            chain = service.query(q["topic"], q["key"], limit)
            assert chain == q["indexChainOrder"], f"{case}: {q['topic']}#{q['key']} ({q['kind']})"
            assert sorted(chain) == q["physicalOffsets"]
        service.close()


def test_get_by_key_keeps_only_the_messages_that_carry_the_key(golden_dir: Path, tmp_path: Path) -> None:
    """`commitlog reindex` over a copy of the named store with the case's settings, then each query
    as `get --key` / `--uniq-key` answer it: a hash collision's message does not carry the key."""
    import shutil

    from store.index.service import IndexConfig
    from store.read.reader import StoreReader
    from store.tools.reindex import reindex

    for i, case in enumerate(index_cases(golden_dir)):
        settings = json.loads((case / "settings.json").read_text())
        store = tmp_path / str(i)
        shutil.copytree(golden_dir / settings["store"], store)
        shutil.rmtree(store / "index", ignore_errors=True)
        reindex(store, IndexConfig(True, settings["maxHashSlotNum"], settings["maxIndexNum"]))
        with StoreReader.open(store) as reader:
            for line in (case / "queries.jsonl").read_text().splitlines():
                q = json.loads(line)
                raw = reader.key_offsets(q["topic"], q["key"], settings.get("maxMsgsNumBatch", 64))
                assert raw == q["indexChainOrder"], f"{case}: {q}"
                found = {o for uniq in (False, True)
                         for o, _m in reader.messages_by_key(q["topic"], q["key"], uniq=uniq)}
                want = set(q["physicalOffsets"]) if q["kind"] == "indexed" else set()
                assert found == want, f"{case}: {q['topic']}#{q['key']} ({q['kind']})"
