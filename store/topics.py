"""config/topics.json: RocketMQ's topic config (TopicConfigManager's JSON), so that a broker started
on the store knows its topics and routes clients to every queue we wrote. Each topic we write gets
readQueueNums = writeQueueNums covering its highest queueId, perm read+write, SINGLE_TAG, not
ordered; what the file holds already (an operator's topics and settings) is kept, and a topic's
queue counts only ever grow. System topics are the broker's own and are left to it.

Written before the commit point that first holds a new topic or queue (write, fsync, rename), so
a topic in the file may at worst have no committed message yet, never the other way round."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from store.errors import StoreError
from store.format.constants import (CLEANUP_POLICY_ATTRIBUTE, CLEANUP_POLICY_COMPACTION, CONFIG_DIR, SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS, TOPIC_FILTER_TYPE,
                                    TOPIC_PERM_READ_WRITE, TOPICS_FILE)
from store.log.segment import write_atomically


class TopicConfigError(StoreError):
    """config/topics.json cannot be read as RocketMQ's topic config."""


def topics_path(root: Path) -> Path:
    return Path(root) / CONFIG_DIR / TOPICS_FILE


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def queue_counts(queue_keys: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Queues each (non-system) topic needs: its highest queueId + 1."""
    out: dict[str, int] = {}
    for topic, qid in queue_keys:
        if not is_system_topic(topic):
            out[topic] = max(out.get(topic, 0), qid + 1)
    return out


def read_topics(root: Path) -> dict[str, Any]:
    """The file as a dict (an empty config when there is none)."""
    path = topics_path(root)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"topicConfigTable": {}, "dataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 0}}
    except ValueError as e:     # an OSError is the disk's, not the file's: the caller's to report
        raise TopicConfigError(f"{path} is not readable JSON ({e}); fix or remove it (a RocketMQ broker "
                               f"would not start on it either)") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("topicConfigTable", {}), dict):
        raise TopicConfigError(f"{path} has no topicConfigTable object: it is not RocketMQ's topics.json")
    obj.setdefault("topicConfigTable", {})
    return obj


def known_queue_counts(root: Path) -> dict[str, int]:
    """How many queues topics.json gives each topic (the smaller of read and write)."""
    out = {}
    for name, cfg in read_topics(root)["topicConfigTable"].items():
        try:
            out[name] = min(int(cfg.get("readQueueNums", 0)), int(cfg.get("writeQueueNums", 0)))
        except (TypeError, ValueError, AttributeError):
            out[name] = 0
    return out


def has_compaction_policy(cfg: Any) -> bool:
    """A topic config that makes a 5.x broker serve the topic from its compaction log."""
    attributes = cfg.get("attributes") if isinstance(cfg, dict) else None
    return isinstance(attributes, dict) and \
        str(attributes.get(CLEANUP_POLICY_ATTRIBUTE, "")).upper() == CLEANUP_POLICY_COMPACTION


def compaction_topics(root: Path) -> frozenset[str]:
    """The topics topics.json makes compaction topics (by us, or by ``mqadmin updateTopic`` on a broker)."""
    try:
        table = read_topics(root)["topicConfigTable"]
    except TopicConfigError:
        return frozenset()
    return frozenset(name for name, cfg in table.items() if has_compaction_policy(cfg))


def merge_topics(root: Path, needed: Mapping[str, int], compaction: Iterable[str] = ()) -> dict[str, int]:
    """Make topics.json cover ``needed`` (topic -> queue count), those of ``compaction`` with the
    ``cleanup.policy`` attribute a 5.x broker writes for ``updateTopic -a +cleanup.policy=COMPACTION``;
    returns the counts it now gives."""
    obj = read_topics(root)
    table = obj["topicConfigTable"]
    changed = False
    compaction = frozenset(compaction)
    for topic, count in sorted(needed.items()):
        cfg = table.get(topic)
        if cfg is None:
            table[topic] = cfg = {"topicName": topic, "readQueueNums": count, "writeQueueNums": count,
                                  "perm": TOPIC_PERM_READ_WRITE, "topicFilterType": TOPIC_FILTER_TYPE,
                                  "topicSysFlag": 0, "order": False, "attributes": {}}
            changed = True
        if topic in compaction and not has_compaction_policy(cfg):
            attributes = cfg.get("attributes")
            cfg["attributes"] = dict(attributes if isinstance(attributes, dict) else {},
                                     **{CLEANUP_POLICY_ATTRIBUTE: CLEANUP_POLICY_COMPACTION})
            changed = True
        for field in ("readQueueNums", "writeQueueNums"):
            if int(cfg.get(field, 0)) < count:
                cfg[field] = count
                changed = True
    if changed:
        version = obj.setdefault("dataVersion", {})
        version["counter"] = int(version.get("counter", 0)) + 1
        version.setdefault("stateVersion", 0)
        version["timestamp"] = int(time.time() * 1000)
        write_atomically(topics_path(root), json.dumps(obj, indent=1, ensure_ascii=False).encode("utf-8"))
    return {name: min(int(c.get("readQueueNums", 0)), int(c.get("writeQueueNums", 0))) for name, c in table.items()}


class TopicsPublisher:
    """The writer's view of config/topics.json: what it gives each topic, read once, written only
    when a commit needs a topic or queue it does not cover yet."""

    def __init__(self, root: Path, compaction: Iterable[str] = ()) -> None:
        self.root = root
        self._known: dict[str, int] | None = None
        self._compaction = frozenset(compaction)
        self._marked: set[str] = set()      # compaction topics topics.json is known to mark so

    def cover(self, queue_keys: Iterable[tuple[str, int]]) -> None:
        """config/topics.json covers every (topic, queueId) of ``queue_keys`` when this returns."""
        needed = queue_counts(queue_keys)
        if self._known is None:
            self._known = known_queue_counts(self.root)
        unmarked = (self._compaction & needed.keys()) - self._marked
        if any(self._known.get(t, 0) < n for t, n in needed.items()) or unmarked:
            self._known = merge_topics(self.root, needed, self._compaction)
            self._marked |= unmarked
