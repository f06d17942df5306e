"""The deployment files agree with the code: the Dockerfile, the driver spark-submit runs, and the
command lines in docs/deploying.md use only `commitlog` options the real argument parser knows, with
values the job accepts; every --trigger in any deploy file is one Spark accepts.

Nothing here needs Docker or Kubernetes. The compose file and the manifests are checked as files in
tests/deploy/test_deploy_compose.py and tests/deploy/test_deploy_k8s.py; the install steps run in
tests/deploy/test_deploy_install.py, the images and the compose stack in tests/deploy/test_compose.py and
tests/deploy/test_cluster_containers.py (with the engine `make test` starts).
"""
from __future__ import annotations

import re

import pytest

from tests.helpers.deploy_files import DEPLOY, ROOT, deployed_command_lines, driver_argv, option_value, parse_commitlog, readme_command_lines

pytestmark = pytest.mark.integration


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


# --- docs/deploying.md -----------------------------------------------------------------------------

def test_readme_command_lines_use_only_real_options() -> None:
    lines = readme_command_lines()
    assert len(lines) >= 5, "the README shows how to run the job"
    for line_no, argv in lines:
        parse_commitlog(argv, f"docs/deploying.md near line {line_no}")


# --- values Spark itself must accept --------------------------------------------------------------

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
