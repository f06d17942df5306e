"""Files the job and its tools write outside the spool are never written through a link someone left
at their name (issue 40's audit: the dead-letter file, the embedded broker's log)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.devtools.broker import free_port, start_tansu
from sink.deadletter import DEAD_LETTER_DIR, DEAD_LETTER_FILE, DeadLetterLog

pytestmark = pytest.mark.unit


def test_a_link_at_the_dead_letter_files_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("someone's file\n" * 10)
    (tmp_path / DEAD_LETTER_DIR).mkdir()
    (tmp_path / DEAD_LETTER_DIR / DEAD_LETTER_FILE).symlink_to(victim)
    with pytest.raises(OSError):
        DeadLetterLog(tmp_path, 0)           # would have cut the victim to 0 bytes
    assert victim.read_text() == "someone's file\n" * 10


def test_the_brokers_log_in_a_shared_directory_is_not_written_through_a_link(tmp_path: Path) -> None:
    port = free_port()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / f"tansu-{port}.log").symlink_to(victim)
    try:
        broker = start_tansu(log_dir=tmp_path, port=port)
    except OSError:
        pass
    else:
        broker.stop()
        pytest.fail("the broker started with its log written through the link")
    assert victim.read_text() == "precious\n"
