"""``--commit-group NAME``: the store's Kafka offsets published to a Kafka consumer group, so Kafka's
own tools (``kafka-consumer-groups --describe``, Burrow, Kafka UI) show the job's lag per partition.

The group is a mirror for monitoring, never a position: the job's position is the store's commit
point, and nothing here reads the group's offsets back (whoever moves them moves only what the tools
show until the next batch commits). The offsets are committed as a consumer outside the group's
membership does (OffsetCommit with no generation, the admin client's alter_group_offsets), after
each batch is committed to the store, on a thread of their own: a broker that refuses them (no Read
ACL on the group, its coordinator moving) costs a warning at most once a minute, never a batch.

A group that a live consumer is a member of is refused at start: its own commits and ours would
overwrite each other, and Kafka refuses ours while it has members anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from ingest.kafka.admin_client import admin_client
from ingest.kafka.offsets import TopicPartitionKey
from ingest.kafka.options import KafkaSourceError

log = logging.getLogger("commitlog.commit_group")

WARN_EVERY_S = 60.0         # a failing commit is said at most this often
# commits at most this often: a batch every 100 ms would be ten writes a second to __consumer_offsets
# for a figure the tools show by the second; the newest offsets offered meanwhile go in the next
COMMIT_EVERY_S = 1.0
CLOSE_WAIT_S = 10.0         # how long the job's end waits for the last commit
COORDINATOR_WAIT_S = 30.0   # how long the start waits for the group's coordinator
# what a group member's entry in a commit says: a monitoring tool shows it beside the offsets
METADATA = "commitlog-ingest: the offsets its store holds (monitoring only, never read back)"


class CommitGroupError(KafkaSourceError):
    """The consumer group cannot be used (a live consumer is a member of it, the group cannot be
    described): the message names it and what to do."""


@dataclass
class CommitCounts:
    """What the committer did, for the metrics."""

    commits: int = 0            # commits the coordinator took, every partition of them
    failures: int = 0           # commits refused or lost
    last_commit_s: float = 0.0  # the wall-clock time of the last commit taken (0: none yet)


def _admin(client_params: Mapping[str, Any]) -> KafkaAdminClient:
    return admin_client(client_params, CommitGroupError, "--commit-group")


def check_group_free(admin: KafkaAdminClient, group: str, timeout_s: float = COORDINATOR_WAIT_S) -> None:
    """Refuse ``group`` when a live consumer is a member of it (an empty, dead or new group is ours).
    A coordinator not there yet (a new cluster makes __consumer_offsets on the first group's use, one
    moving) is waited for up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            described = admin.describe_groups([group])
            break
        except KafkaError as exc:
            if getattr(exc, "retriable", False) and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            raise CommitGroupError(f"--commit-group {group}: the group cannot be described ({exc}); the job "
                                   f"needs Describe and Read on it") from exc
    info = described.get(group, {}) if isinstance(described, Mapping) else {}
    members = info.get("members") or []
    if members:
        state = info.get("group_state") or info.get("state") or "?"
        ids = ", ".join(sorted(str(m.get("client_id") or m.get("member_id")) for m in members)[:3])
        raise CommitGroupError(f"--commit-group {group}: {len(members)} live consumer(s) are members of it "
                               f"(state {state}; {ids}); give a group of its own to this job")


class GroupCommitter:
    """Commits the latest offsets offered to ``group``, on its own thread; ``close`` commits the last.

    ``offer`` never waits: a commit still in progress when the next batch's offsets come is followed
    by one commit of the newest, never a queue of old ones."""

    def __init__(self, client_params: Mapping[str, Any], group: str, clock: Callable[[], float] = time.monotonic,
                 warn_every_s: float = WARN_EVERY_S, commit_every_s: float = COMMIT_EVERY_S) -> None:
        self.group = group
        self._commit_every_s = commit_every_s
        self.counts = CommitCounts()
        self._params = dict(client_params)
        self._clock = clock
        self._warn_every_s = warn_every_s
        self._warned_at: float | None = None
        self._unsaid = 0                 # failures since the last warning
        self._admin: KafkaAdminClient | None = _admin(self._params)
        try:
            check_group_free(self._admin, group)
        except CommitGroupError:
            self._admin.close()
            raise
        self._wanted: dict[TopicPartitionKey, int] | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="commitlog-commit-group", daemon=True)
        self._thread.start()

    def offer(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """The store now holds up to these next offsets: commit them when the thread is free."""
        with self._cond:
            self._wanted = dict(offsets)
            self._cond.notify()

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Commit what was offered last (waiting up to ``timeout_s``), then stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("--commit-group %s: the last commit did not end in %.0f s; the group shows the "
                        "offsets of an earlier batch", self.group, timeout_s)

    def _loop(self) -> None:
        last = None
        while True:
            with self._cond:
                while self._wanted is None and not self._stopping:
                    self._cond.wait()
                if last is not None and not self._stopping:      # the next commit waits its turn
                    self._cond.wait_for(lambda: self._stopping, max(0.0, last + self._commit_every_s - time.monotonic()))
                wanted, self._wanted = self._wanted, None
                stopping = self._stopping
            if wanted:
                last = time.monotonic()
                self._commit(wanted)
            if stopping:
                with self._cond:
                    if self._wanted is None:
                        break
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _commit(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        try:
            if self._admin is None:
                self._admin = _admin(self._params)
            answer = self._admin.alter_group_offsets(
                self.group, {TopicPartition(t, p): OffsetAndMetadata(o, METADATA, -1)
                             for (t, p), o in sorted(offsets.items())})
            refused = {f"{tp.topic}-{tp.partition}": err.__name__ for tp, err in answer.items()
                       if getattr(err, "errno", 0) != 0}
            if refused:
                self._failed(", ".join(f"{k} {v}" for k, v in sorted(refused.items())[:4]))
                return
        except (KafkaError, CommitGroupError, OSError) as exc:
            if self._admin is not None:        # a fresh client finds the coordinator again
                self._admin.close()
                self._admin = None
            self._failed(str(exc) or type(exc).__name__)
            return
        self.counts.commits += 1
        self.counts.last_commit_s = time.time()

    def _failed(self, why: str) -> None:
        self.counts.failures += 1
        self._unsaid += 1
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < self._warn_every_s:
            return
        log.warning("--commit-group %s: %d commit(s) of the stored offsets refused since the last warning (%s); "
                    "the store and the stream go on, the group shows older offsets (a Read ACL on the group?)",
                    self.group, self._unsaid, why)
        self._warned_at, self._unsaid = now, 0
