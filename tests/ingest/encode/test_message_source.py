"""The job's source (format kafka-rocketmq) against the real broker: encoded records, in source order."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from ingest.encode.mapping import MappingConfig
from ingest.encode.message_options import SHORT_NAME, source_options
from ingest.encode.prepare import collect_packed
from sink.batch import prepare
from store.format.codec import CodecConfig, decode_message
from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic

pytestmark = pytest.mark.integration


def test_a_batch_read_in_many_tasks_comes_back_in_source_order_and_numbered_per_queue(
        spark, bootstrap_servers: str) -> None:
    topic = unique_topic("msgsrc")
    create_topics(bootstrap_servers, [topic], partitions=2)
    values = [b"x" * 5000 if i == 9 else b"v%d" % i for i in range(60)]       # partition 1, offset 4: too big
    sent = produce(bootstrap_servers, [(topic, i % 2, None, v, [("h", b"1")]) for i, v in enumerate(values)])
    options = source_options({"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic,
                              "startingOffsets": "earliest", "endingOffsets": "latest",
                              "maxRecordsPerTask": "7", "minRecordsPerTask": "0"},   # each partition read by 5 tasks
                             MappingConfig(), CodecConfig(max_message_size=4000))
    df = spark.read.format(SHORT_NAME).options(**options).load()
    assert df.rdd.getNumPartitions() == 10

    # the store already holds partition 1 below offset 4
    table = prepare(collect_packed(df, MappingConfig(), CodecConfig(max_message_size=4000)), {f"{topic}/1": 4})
    live = table.filter(pc.is_null(table.column("dead_reason")))
    coords = list(zip(live.column("kafka_partition").to_pylist(), live.column("kafka_offset").to_pylist()))
    expected = sorted((s.partition, s.offset) for s in sent if s.value != values[9] and
                      not (s.partition == 1 and s.offset < 4))
    assert coords == expected                                     # source order, nothing held twice
    for q in (0, 1):
        rows = live.filter(pc.equal(live.column("queue_id"), q))
        assert [decode_message(r).body for r in rows.column("record").to_pylist()] == \
            [values[2 * off + q] for off in rows.column("kafka_offset").to_pylist()]
    dead = table.filter(pc.is_valid(table.column("dead_reason"))).to_pylist()
    assert [(d["kafka_partition"], d["raw_value"], d["raw_headers"]) for d in dead] == \
        [(1, values[9], [{"key": "h", "value": b"1"}])]


@pytest.mark.unit
def test_creating_the_source_loads_neither_its_readers_nor_their_libraries() -> None:
    # Spark creates the source in a Python process of its own for every read it plans
    import subprocess
    import sys

    probe = ("import sys, pyspark.sql.worker.create_data_source, ingest.encode.message_source as m; "
             "m.KafkaMessageSource({}); "
             "print(sorted(n for n in ('pyarrow', 'numpy', 'kafka', 'ingest.encode.message_reader', 'sink.handover.packed')"
             " if n in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
