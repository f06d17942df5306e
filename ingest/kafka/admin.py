"""Driver-side Kafka lookups: which partitions to read, their earliest and TRUE latest offsets, and
offsets by timestamp. Never joins a consumer group, never commits.

Broker quirks handled here (pinned in tests/ingest/kafka/test_kafka_source.py):
- Tansu answers ListOffsets "latest" with the base offset of the partition's last record batch + 1,
  not the log end, when producers batch records. A fetch response's high watermark is right on
  both Tansu and Kafka, so ``latest`` fetches once from (reported end - 1) and takes
  max(reported end, high watermark): one small fetch per non-empty partition. A stream's batches
  skip that fetch while the broker's answers have matched it (rechecked every second). Records
  produced between the answer and the fetch put the high watermark past any broker's answer: the
  answer counts as short only if ListOffsets, asked again, still falls short of that watermark.
- Tansu answers ListOffsets by timestamp with offset 0 (timestamp -1 or the first batch's append
  time) whatever the timestamp asked. ``for_timestamp`` checks every answer against the records
  at and just before it and scans the partition when they contradict it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from ingest.kafka.consumer_state import seek_all
from ingest.kafka.offsets import Offsets, TopicPartitionKey
from ingest.kafka.options import KafkaSourceError, kafka_client_params

log = logging.getLogger(__name__)

_PROBE_WAIT_MS = 10
# how long a broker whose ListOffsets answers matched the fetch probes is taken at its word
# (OffsetReader.latest(each_batch=True)): a probe costs a stream's batch ~5 ms, and a short answer
# would only delay its records by this long, since the recheck finds it and probing resumes for good
RECHECK_S = 1.0


def _connected(client: Callable[..., Any], params: Mapping[str, Any]) -> Any:
    """``client(**params)``, a failure to reach the brokers said as one KafkaSourceError."""
    try:
        return client(**params)
    except KafkaError as exc:
        raise KafkaSourceError(f"cannot connect to Kafka at {params.get('bootstrap_servers')}: {exc}") from exc


def _consumer(client_params: Mapping[str, Any], **overrides: Any) -> KafkaConsumer:
    params = dict(client_params)
    params.update(group_id=None, enable_auto_commit=False, allow_auto_create_topics=False,
                  key_deserializer=None, value_deserializer=None)
    params.update(overrides)
    return _connected(KafkaConsumer, params)


def _admin(client_params: Mapping[str, Any]) -> KafkaAdminClient:
    # the admin client refuses settings it does not know (the consumer's fetch and isolation ones)
    known = KafkaAdminClient.DEFAULT_CONFIG
    return _connected(KafkaAdminClient, {k: v for k, v in client_params.items() if k in known})


def true_end(reported: int, high_watermark: int | None, last_stable: int | None, read_committed: bool) -> int:
    """Where a partition's records end for this consumer. read_committed: at the last stable offset
    (records past it belong to transactions still open: a fetch never returns them, and a task
    planned past it would wait out its poll timeout). Else at the high watermark, or ListOffsets'
    answer when larger (Tansu's answer is not the end; a fetch's high watermark is)."""
    if read_committed and last_stable is not None and last_stable >= 0:
        return last_stable
    if read_committed and high_watermark is None:
        return reported                  # Kafka's ListOffsets under read_committed is the LSO
    return max(reported, high_watermark if high_watermark is not None else reported)


def watch_stable_offsets(consumer: KafkaConsumer, into: dict[TopicPartitionKey, int]) -> bool:
    """kafka-python keeps a fetch's high watermark but drops its last stable offset: note that too,
    per partition, in ``into``. False (and nothing noted) if the fetcher is not shaped as expected."""
    fetcher = getattr(consumer, "_fetcher", None)
    parse = getattr(fetcher, "_parse_fetched_data", None)
    if parse is None:
        return False

    def parse_noting_stable(completed_fetch: Any) -> Any:
        lso = getattr(completed_fetch.partition_data, "last_stable_offset", -1)
        tp = completed_fetch.topic_partition
        if lso is not None and lso >= 0:
            into[(tp.topic, tp.partition)] = int(lso)
        return parse(completed_fetch)

    fetcher._parse_fetched_data = parse_noting_stable
    return True


class OffsetReader:
    """One admin client (the partition lists), one metadata consumer (ListOffsets) and one probe
    consumer (high watermarks), created on first use; ``close()`` frees them."""

    def __init__(self, client_params: Mapping[str, Any], timeout_ms: int = 60_000) -> None:
        self._params = dict(client_params)
        self._timeout_ms = timeout_ms
        self._admin: KafkaAdminClient | None = None
        self._meta: KafkaConsumer | None = None
        self._probe: KafkaConsumer | None = None
        self._stable: Offsets = {}       # last stable offsets the probe's fetches reported
        self._reports_exact_at: float | None = None   # when ListOffsets last matched the probes
        self._reports_short = False      # ListOffsets answered short of a probe's end (Tansu)

    @property
    def meta(self) -> KafkaConsumer:
        if self._meta is None:
            self._meta = _consumer(self._params)
        return self._meta

    def close(self) -> None:
        for c in (self._meta, self._probe):
            if c is not None:
                c.close(autocommit=False)
        if self._admin is not None:
            self._admin.close()
        self._admin = self._meta = self._probe = None

    def __enter__(self) -> "OffsetReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, subscribe: Sequence[str] | None = None, pattern: str | None = None,
                   assign: Iterable[TopicPartitionKey] | None = None) -> list[TopicPartitionKey]:
        """The partitions to read now, from fresh metadata (new topics and partitions show up)."""
        if assign is not None:
            return sorted(assign)
        # one Metadata request a call, as Spark's connector's describeTopics: a consumer's topics()
        # refreshes at most once per 100 ms (kafka-python's metadata backoff, whatever
        # kafka.retry.backoff.ms says), which a batch every ~100 ms waited out each time
        if self._admin is None:
            self._admin = _admin(self._params)
        described = self._admin.describe_topics(None if pattern is not None else sorted(set(subscribe or ())))
        if pattern is not None:
            regex = re.compile(pattern)
            described = [t for t in described if regex.fullmatch(t["name"]) and not t["name"].startswith("__")]
        listed = sorted((t["name"], p["partition_index"]) for t in described for p in t["partitions"])
        self._learn(listed)
        return listed

    def _learn(self, tps: Sequence[TopicPartitionKey]) -> None:
        """The metadata consumer sends ListOffsets to the leaders its own metadata names, and leaves
        out a partition that metadata has not seen: refreshed (one wait of up to its 100 ms backoff)
        only when a listing shows a topic or partition it does not know."""
        by_topic: dict[str, set[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, set()).add(partition)
        if any(self.meta.partitions_for_topic(t) != parts for t, parts in by_topic.items()):
            self.meta.topics()

    def earliest(self, tps: Sequence[TopicPartitionKey]) -> Offsets:
        if not tps:
            return {}
        got = self.meta.beginning_offsets([TopicPartition(*tp) for tp in tps], timeout_ms=self._timeout_ms)
        return {(tp.topic, tp.partition): int(o) for tp, o in got.items()}

    def reported_latest(self, tps: Sequence[TopicPartitionKey]) -> Offsets:
        """What ListOffsets "latest" says (not the true end on Tansu)."""
        if not tps:
            return {}
        got = self.meta.end_offsets([TopicPartition(*tp) for tp in tps], timeout_ms=self._timeout_ms)
        return {(tp.topic, tp.partition): int(o) for tp, o in got.items()}

    def latest(self, tps: Sequence[TopicPartitionKey], earliest: Mapping[TopicPartitionKey, int] | None = None,
               each_batch: bool = False, enough: Mapping[TopicPartitionKey, int] | None = None) -> Offsets:
        """The true end (next offset to be written) of each partition. ``each_batch`` (a stream's
        batches, where an end read short is read by a later batch): the fetch probe is skipped while
        this broker's ListOffsets answers have been the probes' true ends, checked again every
        ``RECHECK_S``; one answer short of the true end (Tansu) and every call probes. ``enough``
        (Trigger.AvailableNow's target): a partition whose answer reaches it is not probed, since
        nothing past it is read (its end is then that answer, at least the target)."""
        reported = self.reported_latest(tps)
        if each_batch and not self._reports_short and self._reports_exact_at is not None \
                and time.monotonic() - self._reports_exact_at < RECHECK_S:
            return reported
        if enough is not None:
            tps = [tp for tp in tps if tp not in enough or reported[tp] < enough[tp]]
            if not tps:
                return reported
        earliest = dict(earliest) if earliest is not None else self.earliest(tps)
        # reported == earliest means empty on both brokers (Tansu's answer is a batch base + 1 > earliest)
        to_probe = [tp for tp in tps if reported[tp] > earliest.get(tp, 0)]
        hw, lso = self._high_watermarks({tp: reported[tp] - 1 for tp in to_probe})
        committed = str(self._params.get("isolation_level", "")).lower() == "read_committed"
        ends = dict(reported)
        ends.update({tp: true_end(reported[tp], hw.get(tp), lso.get(tp), committed) for tp in tps})
        if to_probe:
            if self._answers_short({tp: ends[tp] for tp in to_probe if ends[tp] > reported[tp]}):
                self._reports_short = True
            else:
                self._reports_exact_at = time.monotonic()
        return ends

    def _answers_short(self, probed_past: Mapping[TopicPartitionKey, int]) -> bool:
        """Whether ListOffsets answers short of the log end, given the partitions whose probe found
        an end past the answer. Records produced between the answer and the probe do that on any
        broker: asked again, a broker whose answer is the end (Kafka) answers at least the probe's
        end; Tansu still answers the last batch's base + 1."""
        if not probed_past:
            return False
        again = self.reported_latest(list(probed_past))
        return any(again[tp] < end for tp, end in probed_past.items())

    def _high_watermarks(self, fetch_from: Mapping[TopicPartitionKey, int]) -> tuple[Offsets, Offsets]:
        """The high watermark and the last stable offset (where the fetch reports one) of each."""
        if not fetch_from:
            return {}, {}
        if self._probe is None:
            # latest: an out-of-range probe (retention raced us) resets and still returns a high watermark
            self._probe = _consumer(self._params, auto_offset_reset="latest", fetch_max_wait_ms=_PROBE_WAIT_MS,
                                    max_partition_fetch_bytes=1, max_poll_records=1,
                                    enable_incremental_fetch_sessions=False)
            watch_stable_offsets(self._probe, self._stable)
        probe = self._probe
        self._stable.clear()
        probe.unsubscribe()  # fresh partition state: no high watermark left from an earlier probe
        parts = {tp: TopicPartition(*tp) for tp in fetch_from}
        probe.assign(list(parts.values()))
        seek_all(probe, {parts[tp]: max(0, off) for tp, off in fetch_from.items()})
        deadline = time.monotonic() + self._timeout_ms / 1000
        out: Offsets = {}
        while len(out) < len(parts):
            probe.poll(timeout_ms=50, max_records=1, update_offsets=False)
            for tp, part in parts.items():
                hw = probe.highwater(part)
                if hw is not None:
                    out[tp] = int(hw)
            if time.monotonic() > deadline:
                missing = sorted(set(parts) - set(out))
                raise KafkaSourceError(f"no fetch response for {missing} in {self._timeout_ms} ms; "
                                       "is the partition leader available?")
        probe.unsubscribe()
        return out, {tp: self._stable[tp] for tp in out if tp in self._stable}

    def for_timestamp(self, tps: Sequence[TopicPartitionKey], timestamps: Mapping[TopicPartitionKey, int]
                      ) -> dict[TopicPartitionKey, int | None]:
        """The earliest offset whose record timestamp is >= the given one, None when there is none.

        The broker's answer is checked against the records around it (one small fetch): Tansu
        answers offset 0 whatever the timestamp, and a wrong start offset would silently replay
        or skip data. An answer that fails the check is replaced by a scan of the partition."""
        if not tps:
            return {}
        asked = {TopicPartition(*tp): int(timestamps[tp]) for tp in tps}
        got = self.meta.offsets_for_times(dict(asked), timeout_ms=self._timeout_ms)
        earliest = self.earliest(list(tps))
        out: dict[TopicPartitionKey, int | None] = {}
        for part, ts in asked.items():
            answer = got.get(part)
            tp = (part.topic, part.partition)
            if answer is None:
                out[tp] = None
                continue
            off = int(answer.offset)
            around = list(self._records(tp, max(earliest[tp], off - 1), max_count=2, stop_at=off + 1))
            before = [t for o, t in around if o == off - 1]
            at = [t for o, t in around if o == off]
            if at and at[0] >= ts and not (before and before[0] >= ts):
                out[tp] = off
            else:
                log.warning("broker answered offset %d for timestamp %d on %s-%d, which the records "
                            "contradict; scanning the partition", off, ts, *tp)
                out[tp] = self._scan_for_timestamp(tp, ts, earliest[tp])
        return out

    def _records(self, tp: TopicPartitionKey, start: int, max_count: int | None = None,
                 stop_at: int | None = None) -> Iterator[tuple[int, int]]:
        """(offset, timestamp) of records from ``start`` up to the true end (or ``stop_at``)."""
        end = self.latest([tp])[tp]
        if stop_at is not None:
            end = min(end, stop_at)
        if start >= end:
            return iter(())
        return _iter_records(self._params, tp, start, end, max_count, self._timeout_ms)

    def _scan_for_timestamp(self, tp: TopicPartitionKey, ts: int, start: int) -> int | None:
        for off, rec_ts in self._records(tp, start):
            if rec_ts >= ts:
                return off
        return None


def _iter_records(params: Mapping[str, Any], tp: TopicPartitionKey, start: int, end: int,
                  max_count: int | None, timeout_ms: int) -> Iterator[tuple[int, int]]:
    c = _consumer(params, auto_offset_reset="earliest", max_poll_records=100_000,
                  fetch_max_wait_ms=_PROBE_WAIT_MS)
    try:
        part = TopicPartition(*tp)
        c.assign([part])
        c.seek(part, start)
        deadline = time.monotonic() + timeout_ms / 1000
        count = 0
        while c.position(part) < end:
            if time.monotonic() > deadline:
                raise KafkaSourceError(f"reading {tp[0]}-{tp[1]} offsets {start}..{end} took over {timeout_ms} ms")
            for rec in c.poll(timeout_ms=200).get(part, ()):
                if rec.offset >= end:
                    return
                yield rec.offset, rec.timestamp
                count += 1
                if max_count is not None and count >= max_count:
                    return
    finally:
        c.close(autocommit=False)


def _topics_arg(topics: str | Sequence[str] | None, pattern: str | None) -> dict[str, Any]:
    if (topics is None) == (pattern is None):
        raise KafkaSourceError("give exactly one of topics or pattern")
    if isinstance(topics, str):
        topics = [t.strip() for t in topics.split(",") if t.strip()]
    return {"subscribe": topics, "pattern": pattern}


def _params(bootstrap: str, kafka_params: Mapping[str, str] | None) -> dict[str, Any]:
    opts = {f"kafka.{k}" if not k.startswith("kafka.") else k: v for k, v in (kafka_params or {}).items()}
    opts["kafka.bootstrap.servers"] = bootstrap
    return kafka_client_params(opts)


def latest_offsets(bootstrap: str, topics: str | Sequence[str] | None = None, pattern: str | None = None,
                   kafka_params: Mapping[str, str] | None = None) -> Offsets:
    """True end offsets {(topic, partition): next offset} of the topics (or the topics matching
    ``pattern``). ``kafka_params`` are Java-style client settings, with or without the "kafka." prefix."""
    with OffsetReader(_params(bootstrap, kafka_params)) as reader:
        return reader.latest(reader.partitions(**_topics_arg(topics, pattern)))


def earliest_offsets(bootstrap: str, topics: str | Sequence[str] | None = None, pattern: str | None = None,
                     kafka_params: Mapping[str, str] | None = None) -> Offsets:
    with OffsetReader(_params(bootstrap, kafka_params)) as reader:
        return reader.earliest(reader.partitions(**_topics_arg(topics, pattern)))


def offsets_for_timestamp(bootstrap: str, timestamp_ms: int, topics: str | Sequence[str] | None = None,
                          pattern: str | None = None, kafka_params: Mapping[str, str] | None = None
                          ) -> Offsets:
    """For each partition, the first offset whose record timestamp is >= ``timestamp_ms``; a
    partition with no such record maps to its true end offset (reading from there reads nothing old)."""
    with OffsetReader(_params(bootstrap, kafka_params)) as reader:
        tps = reader.partitions(**_topics_arg(topics, pattern))
        found = reader.for_timestamp(tps, {tp: timestamp_ms for tp in tps})
        ends = reader.latest([tp for tp, off in found.items() if off is None])
        return {tp: (off if off is not None else ends[tp]) for tp, off in found.items()}
