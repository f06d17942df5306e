"""What each benchmark script's quick mode must print (its figures and ratios, under their stable
names), and the run that checks it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

# script -> (figures that must be present, ratios that must be present), under their stable names
EXPECTED = {
    "store_append": (
        ["async.body100.py_append_encoded.msgs_per_s", "async.body100.mmap_copy.msgs_per_s",
         "sync.body100.py_append_encoded.msgs_per_s", "sync.body100.py_append_commit.msgs_per_s",
         "sync.body100.write_fdatasync.msgs_per_s", "async.body16384.py_append_table.mb_per_s",
         # RocketMQ's own store, both releases, index off and on, in batches and one by one
         "async.body100.rocketmq4_batch.msgs_per_s", "async.body100.rocketmq4_single.msgs_per_s",
         "sync.body100.rocketmq4_batch_index.msgs_per_s", "async.body100.rocketmq5_batch.msgs_per_s",
         "sync.body100.rocketmq5_single_index.msgs_per_s", "sync.body100.rocketmq5_batch_index.put_msgs_per_s"],
        ["async.body100.ratio.py_encoded_vs_mmap_copy", "sync.body100.ratio.py_encoded_vs_write_fdatasync",
         "async.body100.ratio.py_encoded_vs_rocketmq4_batch", "sync.body100.ratio.py_encoded_vs_rocketmq5_batch",
         "async.body100.ratio.py_encoded_index_vs_rocketmq4_batch_index",
         "sync.body100.ratio.py_encoded_index_vs_rocketmq5_batch_index", "sync.body100.ratio.py_table_vs_rocketmq4_batch",
         "async.body100.ratio.py_encoded_vs_rocketmq5_single", "sync.body100.ratio.rocketmq4_batch_index_on_vs_off",
         "async.body100.ratio.index_on_vs_off", "async.body1024.ratio.index_found_on_vs_off"]),
    "index_bound": (
        ["body100.append_off.wall_ms", "body100.append_on_shipped.cpu_ns_per_msg", "body100.index_alone.cpu_ns_per_msg",
         "body1024.put_only.cpu_ns_per_msg", "body100.bound_found", "body1024.bound_shipped", "body100.measured_shipped"],
        ["body100.ratio.measured_vs_bound_found", "body1024.ratio.measured_shipped_vs_bound_shipped",
         "body100.ratio.bound_shipped_vs_target"]),
    "page_cache": (
        ["drop.msgs_per_s", "keep.msgs_per_s", "drop.cpu_s_per_gb", "keep.cpu_s_per_gb", "write_fdatasync.mb_per_s"],
        ["ratio.drop_vs_keep", "ratio.cpu_keep_vs_drop", "ratio.drop_vs_write_fdatasync"]),
    "roll": (
        ["prealloc.roll.p99_ms", "prealloc.inside.p99_ms", "no_prealloc.roll.max_ms", "prealloc.msgs_per_s"],
        ["prealloc.ratio.roll_p99_vs_inside_p99", "no_prealloc.ratio.roll_p99_vs_inside_p99",
         "ratio.prealloc_vs_no_prealloc_roll_p99"]),
    "recovery": (
        ["seg1.warm.clean_open_s", "seg16.warm.clean_open_s", "seg16.cold.kill_open_s",
         "seg16.warm.revalidate_all.mb_per_s", "seg16.cold.raw_read.mb_per_s"],
        ["ratio.warm.clean_open_largest_vs_smallest", "seg16.cold.ratio.revalidate_vs_raw_read"]),
    "verify": (
        ["body1024.warm.verify.mb_per_s", "body1024.cold.raw_read.mb_per_s", "body100.warm.verify_s", "startup_s"],
        ["body1024.warm.ratio.verify_vs_raw_read", "body100.cold.ratio.verify_vs_raw_read"]),
    "pipeline": (
        ["batch10000.commitlog.sync.msgs_per_s", "batch10000.commitlog.async.batch_p99_ms",
         "batch10000.noop.msgs_per_s", "batch10000.parquet.msgs_per_s",
         "batch10000.commitlog.sync.driver_python_rss_peak_mib", "driver_python_vmhwm_mib", "uniform.direct_share",
         # Kafka's own read rate on the same topic and broker
         "batch10000.kafka_consumer.msgs_per_s", "batch10000.librdkafka.msgs_per_s"],
        ["batch10000.ratio.commitlog_sync_vs_noop", "batch10000.ratio.commitlog_sync_vs_parquet",
         "batch10000.ratio.commitlog_sync_index_on_vs_off", "batch10000.ratio.commitlog_sync_ours_vs_spark_kafka",
         "batch10000.ratio.noop_ours_vs_spark_kafka", "batch10000.ratio.noop_vs_kafka_consumer",
         "batch10000.ratio.commitlog_sync_vs_kafka_consumer", "batch10000.ratio.commitlog_sync_vs_librdkafka"]),
    "index_lookup": (
        ["append.index_on.msgs_per_s", "append.index_off.msgs_per_s", "warm.by_key_ms", "cold.by_uniq_key_ms",
         "warm.absent_ms", "warm.read_at_offset_ms", "cli.get_key_ms"],
        ["append.ratio.index_on_vs_off", "warm.ratio.by_key_vs_read_at_offset", "cold.ratio.by_key_vs_read_at_offset"]),
    "replay": (
        ["replay.msgs_per_s", "plain_consumer.msgs_per_s"],
        ["ratio.replay_vs_plain_consumer"]),
    "replay_files": (
        ["jsonl.replay.msgs_per_s", "jsonl.spark_count.msgs_per_s", "parquet.spark_read.msgs_per_s",
         "parquet.task_closure_bytes"],
        ["jsonl.ratio.replay_vs_spark_count", "parquet.ratio.replay_vs_spark_count"]),
    "cluster": (
        ["local.commitlog.sync.msgs_per_s", "cluster.commitlog.sync.msgs_per_s"],
        ["ratio.cluster_vs_local"]),
    "readback": (
        ["body1024.arrow.mb_per_s", "body1024.arrow_unchecked.mb_per_s", "body1024.verify_scan.mb_per_s",
         "body100.spark.commitlog.msg_per_s", "body100.spark.commitlog_unchecked.msg_per_s",
         "body100.spark.parquet.msg_per_s"],
        ["body1024.ratio.arrow_vs_verify_scan", "body1024.ratio.arrow_crc_vs_unchecked",
         "body100.ratio.spark_crc_vs_unchecked", "body100.ratio.spark_commitlog_vs_parquet"]),
    "costs": (
        ["uniform.sync.read_task.decode+encode.cpu_s_per_m", "uniform.sync.driver.index.cpu_s_per_m",
         "uniform.sync.store_saturates_msgs_per_s", "mixed.async.executor_cores_per_driver_core"],
        ["uniform.sync.ratio.saturates_vs_ceiling"]),
    "brokers": (
        ["tansu.start_s", "kafka.start_s", "kafka.restart_s"],
        ["ratio.kafka_vs_tansu_start"]),
    "spool": (
        ["body100.task.write_ms", "body100.task.write_unchecked_ms", "body100.driver.resolve_ms",
         "body100.driver.check_ms", "body100.driver.check_mac_ms", "body100.driver.hmac_sha256_ms", "body100.driver.check_records_ms",
         "body100.store.write_ms"],
        ["body100.ratio.handover_checked_vs_unchecked", "body100.ratio.check_vs_store_write",
         "body100.ratio.mac_vs_hmac_sha256"]),
    "adopt": (
        ["adopt_open_s", "adopt.records_per_s", "clean_open_s", "revalidate_s"],
        ["ratio.revalidate_vs_adopt"]),
    "latency": (
        ["commitlog.sync.rate10000.p50_ms", "commitlog.sync.rate10000.p99_ms", "commitlog.sync.rate10000.batch_p50_ms",
         "commitlog.sync.rate10000.sink_p50_ms",
         "spark_kafka.source.rate10000.p50_ms", "ours.source.rate10000.batch_p50_ms"],
        ["ratio.rate10000.source_batch_ours_vs_spark", "ratio.rate10000.commitlog_p50_vs_spark_source_p50"]),
    "bridge": (
        ["body100.bridge_sync.whole_msgs_per_s", "body100.bridge_async.own_msgs_per_s",
         "body100.bridge_async.first_msgs_per_s", "body100.bridge_sync.broker_cpu_s",
         "body100.replay_sync.whole_msgs_per_s", "body100.replay_async.own_msgs_per_s",
         "body100.replay_async.first_msgs_per_s", "body100.run_sync.whole_msgs_per_s", "body100.run_sync.cores_busy"],
        ["body100.ratio.replay_sync_vs_bridge_sync.whole", "body100.ratio.replay_async_vs_bridge_async.whole",
         "body100.ratio.replay_async_vs_bridge_async.own", "body100.ratio.replay_async_vs_bridge_async.first",
         "body100.ratio.run_sync_vs_bridge_sync.whole"]),
    "codecs": (
        ["lz4.kafka_python.mb_per_s", "zstd.cramjam.mb_per_s", "snappy.kafka_python.mb_per_s", "gzip.cramjam.mb_per_s"],
        ["lz4.ratio.kafka_python_vs_cramjam", "zstd.ratio.kafka_python_vs_cramjam"]),
    "wide": (
        ["p12.commitlog.msgs_per_s", "p120.commitlog.msgs_per_s", "p120.commitlog.batch_max_ms",
         "p120.commitlog.rss_peak_mib", "p120.commitlog.fds_peak", "p120.store_disk_mib", "p120.verify_s",
         "p120.commit_point_bytes", "p120.spark_kafka_noop.wall_s", "p120.kafka_consumer.msgs_per_s"],
        ["ratio.rate_widest_vs_12", "ratio.rss_widest_vs_12", "ratio.verify_widest_vs_12", "ratio.disk_widest_vs_12",
         "p120.ratio.spark_kafka_noop_wall_vs_ours", "p120.ratio.commitlog_vs_kafka_consumer"]),
}


# The scripts that run Spark streaming jobs are smoke-run from tests/bench/test_bench_smoke_stream.py: a
# module is one xdist worker's (make test runs two), and these take as long as all the others.
STREAM_SCRIPTS = ("cluster", "latency", "pipeline", "replay", "replay_files")
# ... and the ones that start a broker of their own and run several Spark jobs, each from a module of
# its own (tests/bench/test_bench_smoke_wide.py, tests/bench/test_bench_smoke_bridge.py)
OWN_MODULE_SCRIPTS = ("bridge", "wide")


def quick_run_prints_its_figures(script: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), "--quick", "--json",
                           "--out", str(tmp_path / "out")],
                          # a generous bound: a busy 2-core machine runs the cluster script 3x slower
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, f"{script} --quick exited {done.returncode}:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout)
    assert report["bench"] == script and report["mode"] == "quick"
    assert {"nproc", "mem_gib", "disk"} <= set(report["machine"])
    figures, ratios = EXPECTED[script]
    for name in figures:
        fig = report["figures"].get(name)
        assert fig is not None, f"{script}: figure {name} missing; has {sorted(report['figures'])}"
        assert {"median", "min", "max", "unit", "runs"} <= set(fig)
        assert fig["min"] <= fig["median"] <= fig["max"]
    for name in ratios:
        assert name in report["ratios"], f"{script}: ratio {name} missing; has {sorted(report['ratios'])}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), \
        f"{script} left files in its scratch directory"
