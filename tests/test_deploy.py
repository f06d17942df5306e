"""The deployment files agree with the code: the compose file, the Kubernetes manifest, the
Dockerfile and the command lines in deploy/README.md use only `commitlog` options the real
argument parser knows, with values the job accepts, and mount the store where they say.

Nothing here needs Docker or Kubernetes: the image, the compose stack and the manifest are checked
as files. The install steps run in tests/test_deploy_install.py, the images and the compose stack
in tests/test_compose.py and tests/test_cluster_containers.py (with the engine `make test` starts).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from ingest.cli import build_parser

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
MANIFEST = DEPLOY / "k8s" / "commitlog-ingest.yaml"          # the StatefulSet of broker groups
SPARK_OPERATOR = DEPLOY / "k8s" / "spark-operator.yaml"     # one store, executors as pods

sys.path.insert(0, str(DEPLOY))
try:
    from driver import driver_argv  # deploy/driver.py: not a package, the spark-submit app file
finally:
    sys.path.remove(str(DEPLOY))


def parse_commitlog(argv: list[str], where: str):  # noqa: ANN201
    """Parse a `commitlog` command line with the real parser; fail naming the file and the error
    (an unknown option, a bad value). `run`/`replay` lines are also turned into the job's config,
    which checks the values together (one source, segment size a multiple of 4096, ...)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: `commitlog {shlex.join(argv)}` is rejected by the parser:\n{err.getvalue()}")
    if args.command in ("run", "replay"):
        from ingest.config import config_from_args

        try:
            config_from_args(args)
        except ValueError as exc:
            pytest.fail(f"{where}: `commitlog {shlex.join(argv)}`: {exc}")
    return args


def option_value(argv: list[str], option: str) -> str:
    assert option in argv, f"{option} missing from {argv}"
    return argv[argv.index(option) + 1]


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


JOBS = ("commitlog-a", "commitlog-b")     # the two broker groups of docker-compose.yml
HOSTNET = ROOT / "docker-compose.hostnet.yml"


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


# --- deploy/k8s -----------------------------------------------------------------------------------

# Field names of the Spark operator's v1beta2 CRD (SparkApplicationSpec, DriverSpec/ExecutorSpec
# and their SparkPodSpec): a misspelt key would be dropped silently by the API server.
SPEC_FIELDS = {"type", "sparkVersion", "mode", "proxyUser", "image", "imagePullPolicy", "imagePullSecrets",
               "mainClass", "mainApplicationFile", "arguments", "sparkConf", "hadoopConf", "sparkConfigMap",
               "hadoopConfigMap", "volumes", "driver", "executor", "deps", "restartPolicy", "nodeSelector",
               "failureRetries", "retryInterval", "pythonVersion", "memoryOverheadFactor", "monitoring",
               "batchScheduler", "timeToLiveSeconds", "batchSchedulerOptions", "sparkUIOptions",
               "driverIngressOptions", "dynamicAllocation"}
POD_FIELDS = {"template", "cores", "coreLimit", "memory", "memoryOverhead", "gpu", "image", "configMaps",
              "secrets", "env", "envVars", "envFrom", "envSecretKeyRefs", "labels", "annotations",
              "volumeMounts", "affinity", "tolerations", "podSecurityContext", "securityContext",
              "schedulerName", "sidecars", "initContainers", "hostNetwork", "nodeSelector", "dnsConfig",
              "terminationGracePeriodSeconds", "serviceAccount", "hostAliases", "shareProcessNamespace",
              "runtimeClassName", "coreRequest", "javaOptions", "lifecycle", "ports", "priorityClassName"}
DRIVER_ONLY = {"podName", "kubernetesMaster", "serviceAnnotations", "serviceLabels"}
EXECUTOR_ONLY = {"instances", "deleteOnTermination"}


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(SPARK_OPERATOR.read_text()) if d]
    return {d["kind"]: d for d in docs}


@pytest.fixture(scope="module")
def groups() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return {d["kind"]: d for d in docs}


def pod_argv(statefulset: dict, ordinal: int) -> list[str]:
    """The container's arguments as Kubernetes expands them in the pod of ``ordinal`` ($(GROUP))."""
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GROUP"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    return [a.replace("$(GROUP)", str(ordinal)) for a in container["args"]]


def test_the_statefulset_runs_group_k_of_n_in_pod_k(groups: dict[str, dict]) -> None:
    assert set(groups) == {"Service", "StatefulSet", "ServiceMonitor"}
    sts = groups["StatefulSet"]
    replicas = sts["spec"]["replicas"]
    assert replicas >= 2
    for ordinal in range(replicas):
        argv = pod_argv(sts, ordinal)
        args = parse_commitlog(argv, f"deploy/k8s StatefulSet pod {ordinal}")
        assert args.command == "run" and option_value(argv, "--broker-group") == f"{ordinal}/{replicas}"


def test_each_pod_keeps_store_and_checkpoint_on_its_own_claim(groups: dict[str, dict]) -> None:
    spec = groups["StatefulSet"]["spec"]
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    (container,) = spec["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    argv = pod_argv(groups["StatefulSet"], 0)
    for option in ("--store", "--checkpoint"):
        assert mounts.get(option_value(argv, option)) == claim["metadata"]["name"], f"{option} is not on the claim"
    assert not spec["template"]["spec"].get("volumes"), "no volume shared between the pods"
    assert spec["template"]["spec"]["securityContext"]["runAsUser"] == 10001


def test_the_metrics_port_is_the_one_announced_and_scraped(groups: dict[str, dict]) -> None:
    sts, service, monitor = groups["StatefulSet"], groups["Service"], groups["ServiceMonitor"]
    template = sts["spec"]["template"]
    (container,) = template["spec"]["containers"]
    argv = pod_argv(sts, 0)
    port = int(option_value(argv, "--metrics-port"))
    assert option_value(argv, "--metrics-host") == "0.0.0.0", "reachable from outside the pod"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == port == int(template["metadata"]["annotations"]["prometheus.io/port"])
    assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert container["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == "metrics" and service["spec"]["selector"] == template["metadata"]["labels"]
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service_port["name"]]


def test_manifest_is_a_spark_application_with_a_claim(manifests: dict[str, dict]) -> None:
    assert set(manifests) == {"PersistentVolumeClaim", "SparkApplication"}
    app = manifests["SparkApplication"]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    assert set(spec) <= SPEC_FIELDS, f"not CRD fields: {set(spec) - SPEC_FIELDS}"
    assert set(spec["driver"]) <= POD_FIELDS | DRIVER_ONLY, set(spec["driver"]) - POD_FIELDS - DRIVER_ONLY
    assert set(spec["executor"]) <= POD_FIELDS | EXECUTOR_ONLY, set(spec["executor"]) - POD_FIELDS - EXECUTOR_ONLY
    assert spec["type"] == "Python" and spec["mainApplicationFile"] == "local:///opt/commitlog/driver.py"
    assert manifests["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_manifest_arguments_are_a_valid_run_under_spark_submit(manifests: dict[str, dict]) -> None:
    argv = driver_argv(manifests["SparkApplication"]["spec"]["arguments"])
    args = parse_commitlog(argv, "deploy/k8s SparkApplication spec.arguments")
    assert args.command == "run"
    assert option_value(argv, "--master") == "none", "the master must come from the operator"


def test_manifest_mounts_the_claim_at_store_and_checkpoint_on_the_driver_only(manifests: dict[str, dict]) -> None:
    spec = manifests["SparkApplication"]["spec"]
    claim = manifests["PersistentVolumeClaim"]["metadata"]["name"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in spec["driver"]["volumeMounts"]}
    argv = spec["arguments"]
    for option in ("--store", "--checkpoint"):
        path = option_value(argv, option)
        assert path in mounts, f"{option} {path} is not on a mounted volume of the driver"
        assert volumes[mounts[path]]["persistentVolumeClaim"]["claimName"] == claim
    assert not spec["executor"].get("volumeMounts"), "executors must not mount the store (one writer)"


def test_manifest_requests_resources_and_runs_as_the_image_user(manifests: dict[str, dict]) -> None:
    spec = manifests["SparkApplication"]["spec"]
    for role in ("driver", "executor"):
        pod = spec[role]
        assert pod["cores"] >= 1 and pod["coreRequest"] and pod["memory"] and pod["memoryOverhead"]
        assert pod["podSecurityContext"]["runAsUser"] == 10001
    assert spec["executor"]["instances"] >= 1
    assert "USER 10001" in (DEPLOY / "Dockerfile").read_text()


# --- deploy/Dockerfile ----------------------------------------------------------------------------

def test_dockerfile_installs_with_install_sh_as_non_root_with_volumes() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    # the registry's Python by default, a local Debian base as a build argument (.ci/docker-images.sh)
    assert lines[0].startswith("ARG BASE=python:3.11-") and lines[1] == "FROM ${BASE}"
    assert any("deploy/install.sh --system" in line for line in lines)
    assert "openjdk-17-jre-headless" in (DEPLOY / "install.sh").read_text()
    user = [line for line in lines if line.startswith("USER ")]
    assert user and user[-1] not in ("USER root", "USER 0")
    assert re.search(r'VOLUME \[.*"/data/store".*"/data/checkpoint".*\]', text)
    for line in lines:
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"
    assert "exec commitlog" in (DEPLOY / "entrypoint.sh").read_text()


# --- deploy/driver.py -----------------------------------------------------------------------------

def test_driver_leaves_the_master_to_spark_submit_unless_given() -> None:
    assert driver_argv(["run", "--store", "s"]) == ["run", "--store", "s", "--master", "none"]
    assert driver_argv(["-v", "run", "--master", "yarn"]) == ["-v", "run", "--master", "yarn"]
    assert driver_argv(["run", "--master=local[2]"]) == ["run", "--master=local[2]"]
    assert driver_argv(["broker"]) == ["broker"]


# --- deploy/README.md -----------------------------------------------------------------------------

def readme_command_lines() -> list[tuple[int, list[str]]]:
    """Every `commitlog ...`, `deploy/spark-submit.sh ... -- ...` and `docker run ... IMAGE ...`
    line of the README's shell blocks, continuation lines joined, as the `commitlog` argv."""
    text = (DEPLOY / "README.md").read_text()
    found = []
    for block in re.finditer(r"```(?:sh|bash|shell)\n(.*?)```", text, flags=re.S):
        start_line = text[:block.start()].count("\n") + 2
        joined = re.sub(r"\\\n\s*", " ", block.group(1))
        for offset, line in enumerate(joined.splitlines()):
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):   # VAR=value prefixes
                words = words[1:]
            image = next((i for i, w in enumerate(words) if w.startswith("commitlog-ingest:")), None)
            if words[0] == "commitlog":
                found.append((start_line + offset, words[1:]))
            elif words[0].endswith("spark-submit.sh") and "--" in words:
                found.append((start_line + offset, driver_argv(words[words.index("--") + 1:])))
            elif words[:2] == ["docker", "run"] and image is not None and words[image + 1:]:
                found.append((start_line + offset, words[image + 1:]))   # the image's entry point
    return found


def test_readme_command_lines_use_only_real_options() -> None:
    lines = readme_command_lines()
    assert len(lines) >= 5, "the README shows how to run the job"
    for line_no, argv in lines:
        parse_commitlog(argv, f"deploy/README.md near line {line_no}")


# --- values Spark itself must accept --------------------------------------------------------------

def deployed_command_lines() -> list[tuple[str, list[str]]]:
    compose = yaml.safe_load(COMPOSE.read_text())
    app = {d["kind"]: d for d in yaml.safe_load_all(SPARK_OPERATOR.read_text()) if d}["SparkApplication"]
    sts = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}["StatefulSet"]
    return ([(f"docker-compose.yml {s}", compose["services"][s]["command"]) for s in JOBS]
            + [("deploy/k8s/spark-operator.yaml", app["spec"]["arguments"]),
               ("deploy/k8s/commitlog-ingest.yaml", pod_argv(sts, 0))]
            + [(f"deploy/README.md:{n}", argv) for n, argv in readme_command_lines()])


def test_every_trigger_in_the_deploy_files_is_an_interval_spark_accepts(spark: object) -> None:
    # The job hands --trigger to DataStreamWriter.trigger(processingTime=...), whose parser wants
    # "1 second" / "500 milliseconds"; this asks Spark itself, without starting a query.
    stream = spark.readStream.format("rate").load()  # type: ignore[attr-defined]
    checked = 0
    for where, argv in deployed_command_lines():
        if "--trigger" in argv and option_value(argv, "--trigger") != "available-now":
            value = option_value(argv, "--trigger")
            try:
                stream.writeStream.trigger(processingTime=value)
            except Exception as exc:  # noqa: BLE001 - Spark raises its own IllegalArgumentException
                pytest.fail(f"{where}: --trigger {value!r} is rejected by Spark: {str(exc)[:200]}")
            checked += 1
    assert checked >= 3
