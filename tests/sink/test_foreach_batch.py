"""The foreachBatch sink without Spark: a batch "DataFrame" here is already the collected table.

With ``overlap`` a batch is written on the writer thread while the next one is collected; these pin
down the order, the one-batch depth, and that a failed write is never lost in the background."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import map_and_encode
from sink import CommitLogWriter
from sink.foreach_batch import BatchWriteError, ForeachBatchSink
from store import StoreConfig
from store.format.codec import CodecConfig
from tests.helpers.batches import collected, kafka_rows

pytestmark = pytest.mark.unit


class HookedWriter(CommitLogWriter):
    """A writer that runs ``before_write`` (with the batch it was handed) before each write."""

    before_write = staticmethod(lambda table: None)

    def write_batch(self, batch_id, query_id, table):  # type: ignore[no-untyped-def]
        self.before_write(table)
        return super().write_batch(batch_id, query_id, table)


def writer(tmp_path: Path) -> HookedWriter:
    return HookedWriter(tmp_path / "store", StoreConfig(segment_size=1 << 20, flush_mode="sync"))


def test_with_overlap_a_batch_is_written_after_the_call_returns_and_before_the_next_is_written(
        tmp_path: Path) -> None:
    w = writer(tmp_path)
    release = threading.Event()
    order: list[str] = []

    def before_write(table: pa.Table) -> None:
        order.append(f"write from {w.state.kafka_offsets.get('orders/0', 0)}")
        assert release.wait(10)

    w.before_write = before_write
    sink = ForeachBatchSink(w, lambda table: table, overlap=True)
    sink(collected(0), 0)
    assert w.state.batch_id == -1, "the call waited for its write"
    release.set()
    sink(collected(5), 1)            # waits for batch 0, so batch 1 is prepared against its state
    sink.close()
    assert order == ["write from 0", "write from 5"]
    assert (w.state.batch_id, w.state.records, dict(w.state.kafka_offsets)) == (1, 10, {"orders/0": 10})
    w.close()


def test_a_failed_write_stops_the_sink_quietly_where_spark_is_rewound_and_is_raised_to_the_job(
        tmp_path: Path) -> None:
    w = writer(tmp_path)

    def before_write(table: pa.Table) -> None:
        raise OSError(28, "No space left on device")

    w.before_write = before_write
    sink = ForeachBatchSink(w, lambda table: table, overlap=True)
    sink(collected(0), 0)            # returns: the failure is in the writer thread
    sink(collected(5), 1)            # no stack trace through Spark: the job reads ``failure``
    assert sink.stopping.is_set()
    assert isinstance(sink.failure, BatchWriteError) and sink.failure.batch_id == 0
    assert "No space left on device" in str(sink.failure)
    sink(collected(5), 2)            # and every later batch is left to the next run
    with pytest.raises(BatchWriteError, match="writing batch 0 to the store failed: .*No space left"):
        sink.close()
    assert w.state.batch_id == -1 and w.state.records == 0
    w.close()


def test_a_failed_write_fails_the_next_call_where_spark_cannot_be_rewound(tmp_path: Path) -> None:
    w = writer(tmp_path)

    def before_write(table: pa.Table) -> None:
        raise OSError(28, "No space left on device")

    w.before_write = before_write
    sink = ForeachBatchSink(w, lambda table: table, checkpoint_dir="hdfs://nn/checkpoint", overlap=True)
    sink(collected(0), 0)
    with pytest.raises(BatchWriteError, match="No space left on device"):
        sink(collected(5), 1)
    with pytest.raises(BatchWriteError, match="No space left on device"):
        sink(collected(5), 1)
    with pytest.raises(BatchWriteError, match="writing batch 0"):
        sink.close()
    w.close()


def test_request_stop_waits_for_the_batch_in_the_writer_then_refuses_new_ones(tmp_path: Path) -> None:
    w = writer(tmp_path)
    release = threading.Event()

    def before_write(table: pa.Table) -> None:
        assert release.wait(10)

    w.before_write = before_write
    sink = ForeachBatchSink(w, lambda table: table, overlap=True)
    sink(collected(0), 0)
    threading.Timer(0.2, release.set).start()
    assert sink.request_stop()
    assert w.state.batch_id == 0, "stop returned before the batch in the writer was committed"
    sink(collected(5), 1)            # left to the next start, quietly: no checkpoint to rewind
    assert sink.batches == 1 and w.state.batch_id == 0
    sink.checkpoint_dir = "hdfs://nn/checkpoint"   # a checkpoint the next start cannot rewind
    with pytest.raises(InterruptedError):
        sink(collected(5), 1)
    sink.close()
    w.close()


def test_without_overlap_the_call_returns_with_its_batch_committed(tmp_path: Path) -> None:
    w = writer(tmp_path)
    sink = ForeachBatchSink(w, lambda table: table)
    sink(collected(0), 0)
    assert (w.state.batch_id, w.state.records) == (0, 5)
    sink(collected(0, 8), 1)         # a re-read of held records: only the 3 new ones are written
    assert (w.state.batch_id, w.state.records) == (1, 8)
    sink.close()
    w.close()


def test_a_batch_reports_what_it_stored_per_topic_its_dead_letters_and_its_phases(tmp_path: Path) -> None:
    rows = kafka_rows(*[{"topic": t, "offset": i, "value": b"x" * (10 + i), "key": b"k%d" % i}
                        for i, t in enumerate(["a", "b", "a", "a"])],
                      {"topic": "a", "offset": 4, "value": b"y" * 300}, {"topic": "bad topic!", "offset": 5})
    table = pa.Table.from_batches([map_and_encode(rows, MappingConfig(max_message_size=200), CodecConfig())])
    seen = []
    with writer(tmp_path) as w:
        sink = ForeachBatchSink(w, lambda df: df, on_batch=seen.append)
        started = time.perf_counter()
        sink(table, 0)
        wall_ms = (time.perf_counter() - started) * 1e3
        sink.close()
        (stats,) = seen
        assert dict(stats.topic_records) == {"a": 3, "b": 1} and stats.records == 4
        assert sum(stats.topic_bytes.values()) == w.store.committed_offset
        assert stats.topic_bytes["a"] > 3 * stats.topic_bytes["b"]
        assert stats.dead_letters == 2
        assert dict(stats.dead_reasons) == {"body_too_large": 1, "topic_invalid": 1}
        # every phase was timed, and the phases are parts of the batch, not more
        phases = (stats.collect_ms, stats.append_ms, stats.index_ms, stats.flush_ms, stats.commit_ms)
        assert min(phases) > 0 and sum(phases) <= wall_ms
