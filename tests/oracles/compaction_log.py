"""The test oracle of the compaction log (store/compaction): the files read back as a RocketMQ 5
broker reads them, written from its CompactionLog, SparseConsumeQueue and BatchConsumeQueue, not from
the module it checks. Per queue: every queue file has its log file of the same name and size; units
are read from the start of each queue file until the first that is not a record's (offset < 0,
size <= 0, msgBaseOffset < 0 or batchSize <= 0); each unit's record is read from the log at its
offset; a full log file ends with (its blank length, BLANK_MAGIC_CODE) right after its last record,
and its queue file with the end unit (-1, 0, 0, 0, 0, 0, -1, 0)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

UNIT = struct.Struct(">qiqqqhii")       # offset, size, tagsCode, storeTime, msgBaseOffset, batchSize, compacted, reserved
BLANK = 0xCBD43194
MESSAGE_MAGICS = (0xDAA320A7, 0xDAA320A8)


@dataclass
class OracleRecord:
    queue_offset: int
    physical_offset: int       # in the compaction log
    record: bytes              # as the log holds it
    tags_code: int
    store_time: int


def read_queue(root: Path, topic: str, queue_id: int) -> list[OracleRecord]:
    log_dir = root / "compaction" / "compactionLog" / topic / str(queue_id)
    cq_dir = root / "compaction" / "compactionCq" / topic / str(queue_id)
    if not log_dir.exists() and not cq_dir.exists():
        return []
    logs = sorted(p.name for p in log_dir.iterdir() if p.name.isdigit())
    cqs = sorted(p.name for p in cq_dir.iterdir() if p.name.isdigit())
    assert logs == cqs, f"log files {logs}, queue files {cqs}"
    out: list[OracleRecord] = []
    for i, name in enumerate(cqs):
        units, log = (cq_dir / name).read_bytes(), (log_dir / name).read_bytes()
        base = int(name)
        end_of_records = 0
        pos = 0
        while pos + UNIT.size <= len(units):
            phys, size, tags, store_time, qoff, batch, compacted, reserved = UNIT.unpack_from(units, pos)
            if phys < 0 or size <= 0 or qoff < 0 or batch <= 0:
                break
            assert (batch, compacted, reserved) == (1, -1, 0)
            at = phys - base
            rec = log[at:at + size]
            total, magic = struct.unpack_from(">iI", rec)
            assert total == size and magic in MESSAGE_MAGICS
            assert struct.unpack_from(">q", rec, 28)[0] == phys      # PHYSICALOFFSET: its place in this log
            assert struct.unpack_from(">q", rec, 20)[0] == qoff      # QUEUEOFFSET: the topic queue's
            assert not out or qoff > out[-1].queue_offset
            out.append(OracleRecord(qoff, phys, rec, tags, store_time))
            end_of_records = at + size
            pos += UNIT.size
        if i < len(cqs) - 1:        # a file the next one follows is closed
            assert UNIT.unpack_from(units, pos) == (-1, 0, 0, 0, 0, 0, -1, 0)
            blank, magic = struct.unpack_from(">iI", log, end_of_records)
            assert magic == BLANK and blank == len(log) - end_of_records
            assert int(cqs[i + 1]) == base + len(log)
        else:                       # nothing written past the last record
            assert not any(units[pos:]) and not any(log[end_of_records:])
    return out

