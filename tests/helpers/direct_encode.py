"""Kafka records for the C encoder's tests (plain ones, any ones as a hypothesis strategy), the
mapping settings that change every record's bytes, and the check that the C and general paths agree."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import strategies as st

from ingest.encode.mapping import MappingConfig
from ingest.kafka.source import arrow_schema, kafka_schema

TOPIC, PARTITION = "orders", 3
SCHEMA = arrow_schema(kafka_schema(True))
Record = tuple  # (key, value, headers)


def plain_records(rnd: random.Random, count: int) -> list[Record]:
    """What real streams hold: ASCII keys (or none), any body, a few ASCII headers."""
    out = []
    for _ in range(count):
        key = rnd.choice([None, b"", b"order-%d" % rnd.randrange(10**6), b"k"])
        value = rnd.choice([None, b"", rnd.randbytes(rnd.choice([1, 100, 1000]))])
        names = ["TAGS", "trace", "KAFKA_OFFSET", "UNIQ_KEY", "x-y"]
        headers = [(rnd.choice(names), rnd.choice([None, b"", b"Tag%d" % rnd.randrange(5), b"a\x00b"]))
                   for _ in range(rnd.choice([0, 0, 1, 2, 4]))]
        out.append((key, value, headers))
    return out


def assert_same(direct: pa.RecordBatch | None, general: pa.RecordBatch) -> None:
    assert direct is not None, "the direct path refused a fetch it covers"
    assert direct.schema == general.schema
    for name in general.schema.names:
        assert direct.column(name).equals(general.column(name)), name


# settings that change every record's bytes (the queue, the topic, the hosts)
MAPPINGS = pytest.mark.parametrize("mapping", [
    MappingConfig(queue_mode="key-hash", queue_count=7),
    MappingConfig(topic_map={TOPIC: "OrderTopic"}, born_host="10.1.2.3:4567"),
    MappingConfig(store_host="[2001:db8::1]:10911", born_host="[::1]:1"),
    MappingConfig(broker_groups=2),
], ids=["key-hash", "renamed-topic", "ipv6-hosts", "broker-groups"])


TEXTS = st.one_of(st.text(max_size=6).map(str.encode), st.binary(max_size=6),
                  st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"bornHost", b"__CRC32#", b"a\x01", b"\x02"]))
RECORDS = st.lists(st.tuples(
    st.one_of(st.none(), TEXTS), st.one_of(st.none(), st.binary(max_size=40)),
    st.lists(st.tuples(TEXTS.map(lambda b: b.decode("utf-8", "replace")), st.one_of(st.none(), TEXTS)),
             max_size=4)), min_size=1, max_size=30)
