"""The fault sweep end to end through ``replay`` from files (issue 56): one system call on the
store's or the spool's files failed per case (tests/helpers/faults/e2e.py, tests/helpers/faults/e2e_sweep.py: which
files, how many calls, a seeded N per kind, an error among EIO, ENOSPC, EDQUOT, EROFS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.faults.e2e_sweep import FIRST, MORE, export, plain, replay_cmd, sweep
from tests.helpers.programs import require_program

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3.5)]   # 3.2 quiet, 5.9 on 2 shared cores


@pytest.mark.timeout(1200)
def test_replay_with_a_call_on_our_files_failed_ends_in_one_line_and_the_next_run_stores_once(tmp_path: Path) -> None:
    require_program("strace", "to fail the calls")
    base, files = tmp_path / "base", tmp_path / "export"
    export(files, 0, range(FIRST))
    first = plain(replay_cmd(base / "store", files))
    assert first.returncode == 0, first.stderr[-3000:]
    for partition, offsets in MORE.items():
        export(files, partition, offsets)
    expected = [("orders", p, o) for p, r in MORE.items() for o in range(r.stop)]
    sweep("replay", lambda where: replay_cmd(where / "store", files), base, ("store",), expected, tmp_path)
