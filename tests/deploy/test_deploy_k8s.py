"""deploy/k8s as files: the StatefulSet of broker groups (group K of N in pod K, a claim each, the
metrics port announced) and the Spark operator's SparkApplication (fields its CRD knows, a real run
under spark-submit, the claim on the driver only)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers.deploy_files import DEPLOY, MANIFEST, SPARK_OPERATOR, driver_argv, option_value, parse_commitlog, pod_argv

pytestmark = pytest.mark.integration


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
