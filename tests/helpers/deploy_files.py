"""What the deploy tests share: where the deployment files are, and the real `commitlog` parser and
the image's driver applied to the command lines they hold (tests/test_deploy*.py)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from ingest.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DEPLOY_GUIDE = ROOT / "docs" / "deploying.md"
COMPOSE = ROOT / "docker-compose.yml"
HOSTNET = ROOT / "docker-compose.hostnet.yml"
MANIFEST = DEPLOY / "k8s" / "commitlog-ingest.yaml"          # the StatefulSet of broker groups
SPARK_OPERATOR = DEPLOY / "k8s" / "spark-operator.yaml"     # one store, executors as pods
JOBS = ("commitlog-a", "commitlog-b")     # the two broker groups of docker-compose.yml

sys.path.insert(0, str(DEPLOY))
try:
    from driver import driver_argv  # noqa: E402 - deploy/driver.py: not a package, the spark-submit app file
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
        from ingest.job_arguments import config_from_args

        try:
            config_from_args(args)
        except ValueError as exc:
            pytest.fail(f"{where}: `commitlog {shlex.join(argv)}`: {exc}")
    return args


def option_value(argv: list[str], option: str) -> str:
    assert option in argv, f"{option} missing from {argv}"
    return argv[argv.index(option) + 1]


def pod_argv(statefulset: dict, ordinal: int) -> list[str]:
    """The container's arguments as Kubernetes expands them in the pod of ``ordinal`` ($(GROUP))."""
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GROUP"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    return [a.replace("$(GROUP)", str(ordinal)) for a in container["args"]]


def readme_command_lines() -> list[tuple[int, list[str]]]:
    """Every `commitlog ...`, `deploy/spark-submit.sh ... -- ...` and `docker run ... IMAGE ...`
    line of the deployment guide's shell blocks, continuation lines joined, as the `commitlog` argv."""
    text = DEPLOY_GUIDE.read_text()
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


def deployed_command_lines() -> list[tuple[str, list[str]]]:
    compose = yaml.safe_load(COMPOSE.read_text())
    app = {d["kind"]: d for d in yaml.safe_load_all(SPARK_OPERATOR.read_text()) if d}["SparkApplication"]
    sts = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}["StatefulSet"]
    return ([(f"docker-compose.yml {s}", compose["services"][s]["command"]) for s in JOBS]
            + [("deploy/k8s/spark-operator.yaml", app["spec"]["arguments"]),
               ("deploy/k8s/commitlog-ingest.yaml", pod_argv(sts, 0))]
            + [(f"docs/deploying.md:{n}", argv) for n, argv in readme_command_lines()])
