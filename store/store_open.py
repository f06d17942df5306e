"""MessageStore's opening: recover_store is handed the store's parts (StoreParts) and recovers them,
the commit log (store.log.recovery), then the consume queues (store.queue.recovery) and the index to
the recovered end, writes the commit point, and returns what it found (Recovered); mark_open says
so and creates ``abort``. The store writes the checkpoint and starts its services (store_services)."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from store.config import StoreConfig
from store.errors import StoreError
from store.format.constants import ABORT_FILE, CHECKPOINT_FILE, COMMITLOG_DIR
from store.index.hashing import index_key_hashes
from store.index.keys import indexed_keys
from store.index.writer import IndexWriter, mark_index_incomplete
from store.log.append_intent import AppendIntent, AppendIntentLog
from store.log.checkpoint import StoreCheckpoint, checkpoint_damage, read_checkpoint
from store.log.commit_point import CommitPoint, read_commit_point, write_commit_point
from store.log.commitlog import CommitLog
from store.log.recovery import recover
from store.log.segment import fsync_dir
from store.queue.consume_queue import ConsumeQueueStore
from store.queue.recovery import recover_queues, remove_unfinished_queue_files
from store.read.records import RecordReads
from store.read.view import segment_size_on_disk
from store.scan.record_check import scan_segment_fast
from store.topics import TopicsPublisher
from store.usage import OpenReport, open_report

log = logging.getLogger("store.message_store")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class StoreParts:
    """The parts of a MessageStore its open recovers."""

    root: Path
    config: StoreConfig
    log: CommitLog
    cq: ConsumeQueueStore
    index: IndexWriter | None
    intent: AppendIntentLog
    topics: TopicsPublisher
    reads: RecordReads


@dataclass
class Recovered:
    """What recovery left a store with: the open's report, the committed records kept although their
    content failed its CRC, the commit point, and the checkpoint to write."""

    abnormal: bool            # ``abort`` was there: the last writer did not close cleanly
    mode: str
    report: OpenReport
    damaged: tuple[int, ...]
    commit_point: CommitPoint
    checkpoint: StoreCheckpoint
    checkpoint_damage: str | None


def recover_store(parts: StoreParts, truncate_on_corruption: bool, writable: bool) -> Recovered:
    """Recover the commit log (store.log.recovery), then the consume queues and the index to the
    recovered end, and write the commit point when it moved."""
    root, log_, cq, index, reads = parts.root, parts.log, parts.cq, parts.index, parts.reads
    abnormal = (root / ABORT_FILE).exists()
    commit_point = read_commit_point(root)
    checkpoint = read_checkpoint(root / CHECKPOINT_FILE)
    damage = checkpoint_damage(root / CHECKPOINT_FILE)
    if damage is not None:
        checkpoint = None       # as RocketMQ reads a missing one: recovery starts at the first segment
    log_.queue.load()
    remove_unfinished_queue_files(root)
    cq.load()
    intent = parts.intent.current
    if not parts.intent.existed and commit_point is not None and abnormal:
        # a store our writer committed before the intent file existed, left by a crash (its
        # abort file is there): what follows its commit point is its unfinished batch. After a
        # clean close nothing of ours follows it, so another writer's appends are adopted.
        intent = AppendIntent.before_intents(commit_point.offset)
    result = recover(log_, commit_point, checkpoint, abnormal=abnormal,
                     truncate_on_corruption=truncate_on_corruption, codec=parts.config.codec,
                     intent=intent, foreign_tail=parts.config.foreign_tail)
    report = open_report(result, abnormal, commit_point.offset if commit_point else None)
    end = result.end_offset
    valid_point = commit_point if result.commit_point_valid else None
    adopted = result.adopted
    recover_queues(cq, reads.iter_messages, reads.min_offset, end, result.dispatch_from,
                   valid_point.queue_offsets if valid_point is not None else None,
                   also_from=adopted.start if adopted is not None else None)
    if valid_point is not None:
        queue_offsets = dict(valid_point.queue_offsets)
        if adopted is not None:     # the adopted records' queues, as the consume queues now end
            for key, nxt in cq.next_queue_offsets().items():
                queue_offsets[key] = max(queue_offsets.get(key, 0), nxt)
    else:
        queue_offsets = cq.next_queue_offsets()
    log_.queue_offsets = dict(queue_offsets)
    log_.last_record_offset = result.last_record_offset
    if index is not None:
        timestamp_of = lambda phy: reads.read(phy).store_timestamp  # noqa: E731
        # after a crash only: checking the newest file's items reads all of them
        matches = partial(_index_item_matches, reads) if abnormal else None
        index.recover(end, reads.min_offset, timestamp_of, matches)
        if adopted is not None:
            # the other writer's items stay (a broker's are the bytes ours would be); the records it
            # did not index (killed first, or its index off) are indexed here as our appends are
            _index_adopted(parts, adopted.start, end, after=index.covered_end)
    elif writable:
        mark_index_incomplete(root)
    metadata = commit_point.metadata if commit_point else {}
    if commit_point is None or not result.commit_point_valid or commit_point.offset != end:
        commit_point = CommitPoint(end, dict(queue_offsets), metadata, now_ms(), result.last_record_offset)
        if adopted is not None:
            parts.topics.cover(queue_offsets)
        write_commit_point(root, commit_point)
    parts.intent.clear()
    checkpoint = checkpoint or StoreCheckpoint()
    checkpoint.confirm_phy_offset = end
    checkpoint.master_flushed_offset = end
    return Recovered(abnormal, result.mode, report, tuple(result.damaged), commit_point, checkpoint, damage)


def _index_item_matches(reads: RecordReads, phy: int, key_hash: int) -> bool:
    """Whether a record starts at ``phy`` and has a key hashing to ``key_hash`` (an index item
    a power cut left whole)."""
    try:
        msg = reads.read(phy)
    except (StoreError, ValueError):
        return False
    keys = indexed_keys(msg.properties, msg.sys_flag)
    return bool(keys) and key_hash in {int(h) for h in index_key_hashes([msg.topic] * len(keys), keys)}


def _index_adopted(parts: StoreParts, start: int, end: int, after: int) -> None:
    """Index the records in [start, end) (another writer's, adopted) that start past ``after``."""
    assert parts.index is not None
    segments = parts.log.queue
    pos = start
    while pos < end:
        seg = segments.find(pos)
        if seg is None:
            break
        stop = min(seg.size, end - seg.base_offset)
        scan = scan_segment_fast(seg.view, seg.base_offset, stop, parts.config.codec, start=pos - seg.base_offset)
        todo = scan.offsets[scan.offsets > after]
        if len(todo):
            parts.index.add_records(np.frombuffer(seg.view, dtype=np.uint8), todo - seg.base_offset,
                                    seg.base_offset)
        pos = seg.end_offset


def keep_segment_size(root: Path, config: StoreConfig) -> StoreConfig:
    """``config`` with the segment size of the store at ``root``, when it has segments: a store keeps its
    segment size."""
    on_disk = segment_size_on_disk(root / COMMITLOG_DIR)
    if on_disk and on_disk != config.segment_size:
        log.warning("store %s has segments of %d bytes: kept (a store keeps its segment size; %d asked)",
                    root, on_disk, config.segment_size)
        return dataclasses.replace(config, segment_size=on_disk)
    return config


def mark_open(root: Path, r: Recovered) -> None:
    """Say what recovery found, and create ``abort`` (a clean close removes it): the store is open."""
    end = r.commit_point.offset
    if r.checkpoint_damage is not None:
        log.warning("%s: its fields were lost; recovered without it (as RocketMQ does without a checkpoint) "
                    "and rebuilt it at offset %d", r.checkpoint_damage, end)
    (root / ABORT_FILE).touch()
    fsync_dir(root)
    if r.abnormal:
        log.warning("store %s was not closed cleanly: recovered (%s) to offset %d", root, r.mode, end)
