"""A batch collected from several buffers (the read tasks' spool files) is appended from where its
records lie (EncodedBatch.pieces, no copy into one buffer first): the commit log holds the same
bytes as when they are copied together, across segment rolls, with a batch's dead letters left out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from store import MessageStore, StoreConfig
from store.format import encoded_batch
from store.format.batch_codec import EncodedBatch, encode_messages
from store.format.codec import CodecConfig, Message

pytestmark = pytest.mark.unit
SEG = 64 * 1024
TS = 1_700_000_000_123


def records_table(n: int, chunk: int) -> tuple[pa.Table, np.ndarray]:
    """``n`` encoded records in chunks of ``chunk`` rows, every 7th row a dead letter (a null,
    empty record, as the sink hands them); (table, the live rows)."""
    msgs = [Message("T", bytes([i % 251]) * (20 + 37 * i % 900), queue_id=i % 3,
                    properties=f"KEYS\x01k{i}\x02") for i in range(n)]
    table = encoded_batch.to_arrow(encode_messages(msgs, CodecConfig()))     # what the read tasks send
    dead = np.arange(n) % 7 == 3
    records = table.column("record").combine_chunks()
    nulled = pa.array([None if d else r for d, r in zip(dead, records.to_pylist())], pa.binary())
    table = table.set_column(0, "record", nulled)
    batches = [b for b in table.to_batches(max_chunksize=chunk)]
    return pa.Table.from_batches(batches), np.flatnonzero(~dead)


def commit_log_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "commitlog").iterdir())]


def test_pieces_are_appended_as_the_copy_would_append_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, live = records_table(400, 37)
    monkeypatch.setattr(encoded_batch, "PIECE_MIN_BYTES", 1)           # any chunk is a piece
    pieces = EncodedBatch.from_arrow(table, live)
    assert len(pieces.pieces) == table.column("record").num_chunks and pieces.data.size == 0
    copied = EncodedBatch.from_arrow(table.combine_chunks(), live)
    assert not copied.pieces
    assert [bytes(pieces.record(i)) for i in range(len(live))] == [bytes(copied.record(i)) for i in range(len(live))]
    for name, batch in (("pieces", pieces), ("copied", copied)):
        with MessageStore.open(tmp_path / name, StoreConfig(segment_size=SEG)) as s:
            for _ in range(3):
                s.append_encoded(batch, store_timestamp=TS)
            s.commit()
    got, want = commit_log_bytes(tmp_path / "pieces"), commit_log_bytes(tmp_path / "copied")
    assert len(want) > 3 and got == want
    assert encoded_batch.to_arrow(pieces).column("record").to_pylist() == \
        encoded_batch.to_arrow(copied).column("record").to_pylist()


def test_small_chunks_are_copied_together(monkeypatch: pytest.MonkeyPatch) -> None:
    table, live = records_table(100, 10)
    assert not EncodedBatch.from_arrow(table, live).pieces             # 1 MiB a chunk on average, at least
    monkeypatch.setattr(encoded_batch, "PIECE_MIN_BYTES", 1)
    assert EncodedBatch.from_arrow(table, live).pieces


def test_a_piece_whose_records_run_past_its_buffer_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, live = records_table(60, 20)
    monkeypatch.setattr(encoded_batch, "PIECE_MIN_BYTES", 1)
    batch = EncodedBatch.from_arrow(table, live)
    first, data = batch.pieces[1]
    batch.pieces = (batch.pieces[0], (first, data[:-1]), *batch.pieces[2:])
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG)) as s:
        with pytest.raises(ValueError, match="its records need"):
            s.append_encoded(batch)
        assert s.max_offset == 0
