"""What a job's settings (ingest.config.JobConfig) make for the layers below: the store's settings,
the mapping's and the codec's, and the source to read with. Shared by ``run`` and ``replay``: the
same settings write the same bytes whichever command takes them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ingest.config import JobConfig
from ingest.encode.mapping import MappingConfig
from store import IndexConfig, RetentionConfig, StoreConfig
from store import CompactionConfig
from store.format import END_FILE_MIN_BLANK_LENGTH, CodecConfig

if TYPE_CHECKING:
    from sink.handover.spool import Spool


def store_config(cfg: JobConfig, compaction_topics: Iterable[str] = ()) -> StoreConfig:
    """The store's settings; ``compaction_topics``: the RocketMQ topics to write as compaction topics."""
    retention = None
    if cfg.retention_hours is not None:
        retention = RetentionConfig(file_reserved_time_h=cfg.retention_hours, delete_when=cfg.delete_when,
                                    disk_max_used_space_ratio=cfg.disk_max_used_space_ratio,
                                    clean_immediately_ratio=max(0.85, cfg.disk_max_used_space_ratio),
                                    disk_full_ratio=max(0.90, cfg.disk_max_used_space_ratio))
    return StoreConfig(segment_size=cfg.segment_size, flush_mode=cfg.flush,
                       consume_queue_units=cfg.consume_queue_units, retention=retention,
                       codec=codec_config(cfg), drop_cache_behind=cfg.drop_cache_behind,
                       foreign_tail=cfg.foreign_tail, index=IndexConfig(cfg.message_index, cfg.max_hash_slot_num, cfg.max_index_num),
                       compaction=CompactionConfig(frozenset(compaction_topics), cfg.compaction_file_size,
                                                   cfg.compaction_queue_file_size))


def mapping_config(cfg: JobConfig) -> MappingConfig:
    group = cfg.group
    return MappingConfig(topic_map=dict(cfg.topic_map), queue_mode=cfg.queue_mode, queue_count=cfg.queue_count,
                         broker_groups=group.count if group else 1, store_host=cfg.store_host, born_host=cfg.born_host,
                         born_host_header=cfg.born_host_header, envelope=cfg.envelope,
                         max_message_size=cfg.message_size_limit)


def codec_config(cfg: JobConfig) -> CodecConfig:
    return CodecConfig(max_message_size=cfg.message_size_limit,
                       segment_room=cfg.segment_size - END_FILE_MIN_BLANK_LENGTH)


def source_reader(cfg: JobConfig, spark: Any, kafka_options: dict[str, str],
                  spool: Spool | None = None) -> tuple[str, dict[str, str]]:
    """(format, options) to read with. Ours (``kafka-python``) reads through the message source, which
    maps and encodes in its read tasks; Spark's own, only when its package is on the classpath, gives
    Kafka columns that ingest.encode.prepare maps with mapInArrow."""
    from ingest.encode.message_options import SHORT_NAME, source_options
    from ingest.kafka.source import source_format, spark_kafka_available

    fmt = source_format(cfg.source)
    if fmt == "kafka":
        if not spark_kafka_available(spark):
            raise RuntimeError("--source spark-kafka needs the spark-sql-kafka package on the classpath "
                               "(spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>)")
        return fmt, kafka_options
    return SHORT_NAME, source_options(kafka_options, mapping_config(cfg), codec_config(cfg),
                                      None if spool is None else spool.target, index_keys=cfg.message_index)


def load_source(reader: Any, fmt: str, options: dict[str, str]) -> Any:
    """``reader`` (spark.read or spark.readStream) loaded from the source ``source_reader`` chose. Ours
    is given its schema: Spark then takes it as it is, and the Python process that creates the source
    for each read need not load what computes it (ingest.encode.message_source)."""
    from ingest.encode.message_options import SHORT_NAME

    reader = reader.format(fmt).options(**options)
    if fmt == SHORT_NAME:
        from sink.handover.packed import packed_spark_schema

        reader = reader.schema(packed_spark_schema())
    return reader.load()
