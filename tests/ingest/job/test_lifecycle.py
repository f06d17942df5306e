"""One job's lifecycle (ingest.lifecycle), shared by run and replay: its settings are refused before
anything starts, and what it opened closes in one order, whatever ends the job."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path

import pytest

from ingest import lifecycle
from ingest.config import JobConfig
from ingest.lifecycle import JobLifecycle
from sink.handover.trust import UntrustedPathError

pytestmark = pytest.mark.unit


class _Spark:
    """Stands for a session the job built: the lifecycle only stops it."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def stop(self) -> None:
        self.events.append("spark stopped")


def _config(tmp_path: Path, **settings: object) -> JobConfig:
    return JobConfig(store=str(tmp_path / "store"), skip_preflight=True, spool_dir="off", **settings)


@pytest.mark.parametrize("ending", ["done", "a failure"])
def test_what_a_job_opened_closes_in_one_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    events: list[str] = []
    job = JobLifecycle(_config(tmp_path), "replay")
    with pytest.raises(RuntimeError) if ending == "a failure" else nullcontext():
        with job:
            writer = job.open_writer()
            job.spark = _Spark(events)              # as session() would have built it
            close = writer.close
            monkeypatch.setattr(writer, "close", lambda: (events.append("writer closed"), close()))
            job.closing(lambda: events.append("closing: the command's own"))
            job.closed(lambda: events.append(f"closed: store committed at {writer.store.committed_offset}"))
            if ending == "a failure":
                raise RuntimeError("the job failed")
    assert events == ["closing: the command's own", "writer closed", "closed: store committed at 0",
                      "spark stopped"]
    assert writer.store.closed_cleanly


def test_a_session_the_caller_gave_is_left_running(tmp_path: Path) -> None:
    events: list[str] = []
    with JobLifecycle(_config(tmp_path), "replay", spark=_Spark(events)) as job:
        job.open_writer()
    assert events == []


def test_a_session_started_early_is_built_beside_the_command_and_stopped_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    may_finish = threading.Event()

    def build(cfg: JobConfig) -> _Spark:
        may_finish.wait(10)
        events.append(f"built on {threading.current_thread().name}")
        return _Spark(events)

    monkeypatch.setattr(lifecycle, "spark_session", build)
    with JobLifecycle(_config(tmp_path), "replay") as job:
        job.start_session()
        events.append("the command goes on")       # while the session is being built
        may_finish.set()
        assert job.session() is job.session()
    assert events == ["the command goes on", "built on spark-start", "spark stopped"]


def test_a_session_that_failed_to_start_fails_where_the_command_asks_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def build(cfg: JobConfig) -> _Spark:
        raise RuntimeError("no java")

    monkeypatch.setattr(lifecycle, "spark_session", build)
    with JobLifecycle(_config(tmp_path), "replay") as job:
        job.start_session()
        with pytest.raises(RuntimeError, match="no java"):
            job.session()


def test_a_job_that_fails_before_it_asks_for_its_session_does_not_wait_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    never = threading.Event()
    monkeypatch.setattr(lifecycle, "spark_session", lambda cfg: never.wait(30))
    with pytest.raises(RuntimeError, match="the plan failed"):
        with JobLifecycle(_config(tmp_path), "replay") as job:
            job.start_session()
            raise RuntimeError("the plan failed")       # back at once: the JVM goes with the process
    never.set()


def test_a_spool_directory_another_user_can_write_is_refused_before_anything_opens(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)      # writable by all, and not sticky
    with pytest.raises(UntrustedPathError, match="--spool-dir"):
        JobLifecycle(JobConfig(store=str(tmp_path / "store"), skip_preflight=True, spool_dir=str(shared)), "run")
    assert not (tmp_path / "store").exists()


def test_a_group_that_committed_after_the_settings_were_checked_is_refused_under_the_lock(tmp_path: Path) -> None:
    from ingest.broker_groups import BrokerGroupError
    from ingest.lifecycle import check_settings
    from sink.writer import CommitLogWriter
    from store import StoreConfig
    from tests.helpers.batches import collected

    cfg = _config(tmp_path, broker_group="1/2")
    check_settings(cfg, "run")                 # the store is empty: any group may take it
    job = JobLifecycle(cfg, "run")
    with CommitLogWriter(tmp_path / "store", StoreConfig(), broker_group="0/2") as other:
        other.write_batch(0, "q", collected(0))     # another group's job got there first
    with job, pytest.raises(BrokerGroupError, match=r"--broker-group 1/2: the store .* holds broker group 0/2"):
        job.open_writer()
    assert job.writer is None
    with CommitLogWriter(tmp_path / "store", StoreConfig(), broker_group="0/2"):
        pass                                   # the refused writer let go of the lock
