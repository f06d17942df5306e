"""docker-compose.yml and its overrides, as files: Kafka from our jars, every command line a real
`commitlog` one, the two broker groups on distinct ports, Prometheus scraping both (the stack itself runs
in tests/deploy/test_compose.py)."""

from __future__ import annotations

import importlib
import re

import pytest
import yaml

from tests.helpers.deploy_files import COMPOSE, DEPLOY, HOSTNET, JOBS, ROOT, option_value, parse_commitlog

pytestmark = pytest.mark.integration


# --- docker-compose.yml ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_runs_kafka_in_kraft_mode_from_an_image_built_from_our_jars(compose: dict) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"] == "commitlog-ingest/kafka:4.1.1"
    build = ROOT / kafka["build"]["context"]
    assert (build / kafka["build"]["dockerfile"]).exists() and (build / ".dockerignore").exists()
    assert "!jvm/lib/kafka" in (build / ".dockerignore").read_text().split()
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert "healthcheck" in kafka and "9092" in " ".join(kafka["healthcheck"]["test"])




def test_compose_reads_with_compose_v1_and_builds_every_image_but_grafana_locally(compose: dict) -> None:
    # compose 1.29 refuses a top-level `name:`; without `version:` both v1 and v2 read the Compose Specification
    assert set(compose) <= {"services", "volumes"} | {k for k in compose if k.startswith("x-")}
    for name, service in compose["services"].items():
        if name == "grafana":
            assert service["profiles"] == ["dashboard"], "the registry's image: an optional profile"
        else:
            assert "build" in service, f"{name}: an image built locally, not pulled"


def test_compose_hostnet_override_changes_only_the_network(compose: dict) -> None:
    override = yaml.safe_load(HOSTNET.read_text())
    assert set(override["services"]) == set(compose["services"])
    network_keys = {"network_mode", "extra_hosts"}
    for name, service in override["services"].items():
        assert service["network_mode"] == "host"
        assert {h.split(":")[0] for h in service["extra_hosts"]} >= {"kafka"} | set(JOBS)
        extra = set(service) - network_keys
        if name == "kafka":        # where it listens and what it advertises: 127.0.0.1
            assert extra == {"environment"}
            assert set(service["environment"]) == {"KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS"}
            assert all("127.0.0.1" in v for v in service["environment"].values())
        elif name == "prometheus":  # its listen address, the rest of its command as in the base file
            assert extra == {"command"}
            assert set(service["command"]) - set(compose["services"][name]["command"]) == {
                "--web.listen-address=127.0.0.1:9090"}
        elif name in JOBS:          # Spark binds to 127.0.0.1 (the host's name is not resolvable there)
            assert extra == {"environment"} and service["environment"] == {"SPARK_LOCAL_IP": "127.0.0.1"}
        else:
            assert not extra, f"{name}: {extra}"


def test_compose_publishes_ports_only_in_the_bridge_networks_override(compose: dict) -> None:
    assert not any("ports" in s for s in compose["services"].values()), "host network: no published ports"
    published = yaml.safe_load((ROOT / "docker-compose.override.yml").read_text())["services"]
    assert published["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]
    assert published["grafana"]["ports"] == ["127.0.0.1:3000:3000"]


def test_compose_jobs_use_distinct_ports_so_they_can_share_the_hosts_network(compose: dict) -> None:
    argvs = [compose["services"][s]["command"] for s in JOBS]
    assert len({option_value(a, "--metrics-port") for a in argvs}) == 2
    ui = [[v for v in a if str(v).startswith("spark.ui.port=")] for a in argvs]
    assert all(len(u) == 1 for u in ui) and ui[0] != ui[1]


@pytest.mark.parametrize("service", JOBS)
def test_compose_job_command_uses_only_real_options_and_the_volumes(compose: dict, service: str) -> None:
    job = compose["services"][service]
    argv = job["command"]
    args = parse_commitlog(argv, f"docker-compose.yml services.{service}.command")
    assert args.command == "run"
    assert option_value(argv, "--bootstrap-servers") == "kafka:9092"
    mounts = dict(v.split(":", 1)[::-1] for v in job["volumes"])   # mount path -> volume name
    store, checkpoint = option_value(argv, "--store"), option_value(argv, "--checkpoint")
    suffix = service.rsplit("-", 1)[1]
    assert mounts.get(store) == f"store-{suffix}" and mounts.get(checkpoint) == f"checkpoint-{suffix}", mounts
    assert {f"store-{suffix}", f"checkpoint-{suffix}"} <= set(compose["volumes"]), "named volumes, not bind mounts"
    assert job["healthcheck"]["test"] and "/data/store/lock" in " ".join(job["healthcheck"]["test"])
    assert job["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_compose_groups_share_the_topics_each_with_a_store_of_its_own(compose: dict) -> None:
    argvs = [compose["services"][s]["command"] for s in JOBS]
    assert sorted(option_value(a, "--broker-group") for a in argvs) == ["0/2", "1/2"]
    assert len({option_value(a, "--subscribe") for a in argvs}) == 1, "both groups read the same topics"
    volumes = [set(compose["services"][s]["volumes"]) for s in JOBS]
    assert not volumes[0] & volumes[1], "a store (and a checkpoint) per group"


def test_compose_prometheus_scrapes_both_jobs_with_the_rules(compose: dict) -> None:
    prometheus = compose["services"]["prometheus"]
    mounted = {v.split(":")[1]: ROOT / v.split(":")[0] for v in prometheus["volumes"] if v.startswith("./")}
    config = yaml.safe_load(mounted["/etc/prometheus/prometheus.yml"].read_text())
    assert config["rule_files"] == ["/etc/prometheus/commitlog-rules.yml"]
    assert mounted["/etc/prometheus/commitlog-rules.yml"] == DEPLOY / "prometheus" / "commitlog-rules.yml"
    (scrape,) = config["scrape_configs"]
    targets = sorted(t for c in scrape["static_configs"] for t in c["targets"])
    expected = []
    for service in JOBS:
        argv = compose["services"][service]["command"]
        assert option_value(argv, "--metrics-host") == "0.0.0.0", "reachable from the Prometheus container"
        expected.append(f"{service}:{option_value(argv, '--metrics-port')}")
    assert targets == sorted(expected)
    grafana = compose["services"]["grafana"]
    for volume in grafana["volumes"]:
        assert (ROOT / volume.split(":")[0]).exists(), f"grafana mounts {volume}, which is not in the repository"


def test_compose_producer_feeds_the_topics_the_job_subscribes(compose: dict) -> None:
    produce = compose["services"]["produce"]
    script = produce["command"][0]
    compile(script, "docker-compose.yml:produce", "exec")
    # Every name the producer imports from the project exists.
    for module, names in re.findall(r"^from ([\w.]+) import (.+)$", script, flags=re.M):
        mod = importlib.import_module(module)
        for name in (n.strip() for n in names.split(",")):
            assert hasattr(mod, name), f"the compose producer imports {module}.{name}, which does not exist"
    from ingest.devtools.demo import TOPICS

    subscribed = option_value(compose["services"]["commitlog-a"]["command"], "--subscribe").split(",")
    assert sorted(subscribed) == sorted(TOPICS)
