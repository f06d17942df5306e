"""What an operator installs to watch the job, checked as Prometheus and Grafana read it: the alert
rules with ``promtool check rules`` and ``promtool test rules`` on made-up series, the compose
Prometheus config with ``promtool check config``, the Grafana dashboard against Grafana's own dashboard
schema (the typed models of grafana-foundation-sdk, generated from it), and every metric they name
against what the job exports. (tests/deploy/test_metrics_prometheus.py runs the dashboard's queries on a
live Prometheus.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ingest.metrics import JobMetrics
from sink import BatchStats
from store import MessageStore, StoreConfig
from tests.helpers.monitoring import DASHBOARD, dashboard_exprs

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "commitlog-rules.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (make test "
                                    "installs Debian's prometheus package where apt-get runs as root)")


def promtool(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def exported_names(tmp_path: Path) -> set[str]:
    """Every metric name the job exports, once a batch is counted and a store is watched."""
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client import generate_latest

    metrics = JobMetrics("run", str(tmp_path))
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 20)) as store:
        metrics.watch_store(store.usage, store.open_report)
        metrics.batch(BatchStats(0, 1, 1, 1.0, 1.0, 1.0, 10, topic_records={"t": 1}, topic_bytes={"t": 10},
                                 dead_reasons={"x": 1}))
        metrics.kafka_lag({("t", 0): 1})
        text = generate_latest(metrics.registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def named_metrics(text: str) -> set[str]:
    return set(re.findall(r"\bcommitlog_[a-z_]+\b", text))


def test_the_rules_and_the_dashboard_name_only_metrics_the_job_exports(tmp_path: Path) -> None:
    exported = exported_names(tmp_path)
    for where, text in (("rules", RULES.read_text()), ("dashboard", "\n".join(dashboard_exprs()))):
        used = named_metrics(text)
        assert used and used <= exported, f"the {where} name metrics the job does not export: {used - exported}"
    board_vars = json.loads(DASHBOARD.read_text())["templating"]["list"]
    assert named_metrics(board_vars[1]["query"]["query"]) <= exported


@needs_promtool
def test_promtool_accepts_the_rules_and_the_compose_config(tmp_path: Path) -> None:
    assert "SUCCESS: 8 rules found" in promtool("check", "rules", str(RULES))
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["rule_files"] = [str(RULES)]                 # where docker-compose.yml mounts it, here
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    promtool("check", "config", str(tmp_path / "prometheus.yml"))


ALERT_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  # lag growing from 20,000 by 1,000 a minute for an hour: warned after its 15 minutes
  - interval: 1m
    input_series:
      - series: 'commitlog_kafka_lag_records{{instance="job-a", topic="t", partition="0"}}'
        values: '20000+1000x60'
      - series: 'commitlog_kafka_lag_records{{instance="job-b", topic="t", partition="0"}}'
        values: '20000x60'
      - series: 'commitlog_kafka_lag_records{{instance="job-c", topic="t", partition="0"}}'
        values: '80000-1000x60'
    alert_rule_test:
      - eval_time: 10m
        alertname: CommitlogLagGrowing
        exp_alerts: []
      - eval_time: 40m
        alertname: CommitlogLagGrowing
        exp_alerts:
          - exp_labels: {{severity: warning, instance: job-a}}
            exp_annotations:
              summary: "commitlog-ingest job-a falls behind Kafka"
              description: "60k records behind the latest offsets and growing for 15 minutes."
  # a job with records waiting and no commit for half an hour; another idle with nothing waiting
  - interval: 1m
    input_series:
      - series: 'commitlog_store_last_commit_timestamp_seconds{{instance="stuck"}}'
        values: '0x40'
      - series: 'commitlog_kafka_lag_records{{instance="stuck", topic="t", partition="0"}}'
        values: '5x40'
      - series: 'commitlog_store_last_commit_timestamp_seconds{{instance="idle"}}'
        values: '0x40'
      - series: 'commitlog_kafka_lag_records{{instance="idle", topic="t", partition="0"}}'
        values: '0x40'
    alert_rule_test:
      - eval_time: 20m
        alertname: CommitlogNoCommit
        exp_alerts:
          - exp_labels: {{severity: critical, instance: stuck}}
            exp_annotations:
              summary: "commitlog-ingest stuck has not committed for 10 minutes with records waiting"
  - interval: 1m
    input_series:
      - series: 'commitlog_store_open_damaged_records{{instance="j"}}'
        values: '1x5'
      - series: 'up{{job="commitlog", instance="gone"}}'
        values: '0x10'
    alert_rule_test:
      - eval_time: 2m
        alertname: CommitlogStoreDamaged
        exp_alerts:
          - exp_labels: {{severity: critical, instance: j}}
            exp_annotations:
              summary: "commitlog-ingest j opened a store with damaged committed data"
              description: "Run `commitlog verify` on the store; restore the named segments from a backup."
      - eval_time: 8m
        alertname: CommitlogDown
        exp_alerts:
          - exp_labels: {{severity: critical, instance: gone, job: commitlog}}
            exp_annotations:
              summary: "commitlog-ingest gone is not answering scrapes"
  # one job stores every record within half a second, another past 2 s: only the second is warned
  - interval: 1m
    input_series:
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="fast", le="0.5"}}'
        values: '0+100x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="fast", le="2.0"}}'
        values: '0+100x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="fast", le="3.0"}}'
        values: '0+100x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="fast", le="+Inf"}}'
        values: '0+100x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="slow", le="0.5"}}'
        values: '0x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="slow", le="2.0"}}'
        values: '0x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="slow", le="3.0"}}'
        values: '0+100x30'
      - series: 'commitlog_end_to_end_latency_seconds_bucket{{instance="slow", le="+Inf"}}'
        values: '0+100x30'
    alert_rule_test:
      - eval_time: 8m
        alertname: CommitlogLatencyHigh
        exp_alerts: []
      - eval_time: 20m
        alertname: CommitlogLatencyHigh
        exp_alerts:
          - exp_labels: {{severity: warning, instance: slow}}
            exp_annotations:
              summary: "commitlog-ingest slow stores records late"
              description: "p99 end-to-end latency 2.99s for 10 minutes (objective: 2s)."
"""


@needs_promtool
def test_the_alerts_fire_on_growing_lag_a_stuck_job_and_late_records_only(tmp_path: Path) -> None:
    (tmp_path / "alerts_test.yml").write_text(ALERT_TESTS.format(rules=json.dumps(str(RULES))))
    promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)


def _lost(ours: object, theirs: object, path: str = "") -> list[str]:
    """Paths of ``ours`` that Grafana's model dropped or changed on the way through it."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return [path]
        return [p for k, v in ours.items() for p in (_lost(v, theirs[k], f"{path}/{k}") if k in theirs
                                                       else [f"{path}/{k}"])]
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return [path]
        return [p for i, (a, b) in enumerate(zip(ours, theirs)) for p in _lost(a, b, f"{path}[{i}]")]
    return [] if ours == theirs else [path]


def test_the_dashboard_is_grafana_s_dashboard_model_field_for_field() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()     # the panel types' options and the Prometheus query's fields
    ours = json.loads(DASHBOARD.read_text())
    theirs = json.loads(json.dumps(Dashboard.from_json(ours), cls=JSONEncoder))
    lost = _lost(ours, theirs)
    assert not lost, f"fields Grafana's dashboard schema does not have (misspelt or misplaced): {lost}"


def test_the_dashboard_lays_its_panels_on_grafana_s_grid_and_queries_its_prometheus() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["schemaVersion"] >= 36 and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, f"panel {p['title']!r} leaves the 24-column grid"
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and p["targets"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs))
            assert all('instance=~"$instance"' in t["expr"] for t in p["targets"]), p["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for shown in ("lag", "records stored", "bytes stored", "dead letters", "batches", "phases", "committed",
                  "free disk", "segments", "index fill", "since the last commit", "damaged"):
        assert shown in titles, f"no panel shows {shown}"
