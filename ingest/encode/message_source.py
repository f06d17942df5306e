"""The job's Spark source: Kafka records read, mapped and encoded as RocketMQ records in the read tasks.

    spark.readStream.format("kafka-rocketmq").options(**kafka_options)
         .option("commitlog.prepare", prepare_option(mapping, codec)).load()

The options and offsets are the ``kafka-python`` source's (ingest.kafka.source); each row is a batch
of ingest.encode.prepare.ENCODED_SCHEMA records packed into one binary value (sink.handover.packed). Mapping and
encoding inside the read task means a record enters the JVM once, as a commit-log record: going in
as Kafka columns and back out to Python for a ``mapInArrow`` cost as much again as the whole read
(BENCHMARKS.md, pipeline); packing spares the JVM its per-row conversions; with the ``commitlog.spoolDir`` option (local
mode) a task writes its batch to a file there and only the file's name and MAC cross Spark (sink.handover.spool). Where the mapping's
default rules cover a fetch, the task goes from the fetched bytes to CommitLog records in one C pass
(ingest.encode.direct_encode); otherwise through Kafka columns and ingest.encode.prepare.map_and_encode. A task reads one
Kafka offset range in offset order and the ranges are planned in (topic, partition, offset) order,
so a collected batch is in source order; ingest.encode.prepare relies on that.

The driver writes the options (ingest.encode.message_options); the readers that plan and run the
tasks are ingest.encode.message_reader's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ingest.encode.message_options import SHORT_NAME

if TYPE_CHECKING:
    from ingest.encode.message_reader import MessageBatchReader, MessageStreamReader


class KafkaMessageSource(DataSource):
    """Registered as ``kafka-rocketmq``; see the module docstring. Spark creates it in a Python
    process of its own for every read it plans: the readers (ingest.encode.message_reader, with
    pyarrow, kafka-python and the C passes) load only where they are used, and the schema is
    computed only when the read did not give it (``spark.read.schema(packed_spark_schema())``)."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        from sink.handover.packed import packed_spark_schema

        return packed_spark_schema()

    def reader(self, schema: StructType) -> MessageBatchReader:
        from ingest.encode.message_reader import MessageBatchReader

        return MessageBatchReader(self.options)

    def streamReader(self, schema: StructType) -> MessageStreamReader:
        from ingest.encode.message_reader import MessageStreamReader

        return MessageStreamReader(self.options)
