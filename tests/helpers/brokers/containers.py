"""What the container tests share (tests/deploy/test_compose.py): the engine and images `make test` provides
(.ci/docker-engine.sh), or a skip saying why (a failure under CI, where they must run)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ingest.devtools.broker import require_docker
from ingest.devtools.broker.container import docker_available

ROOT = Path(__file__).resolve().parents[3]
IMAGES = ("commitlog-ingest:0.1.0", "commitlog-ingest/kafka:4.1.1", "commitlog-ingest/prometheus:bookworm")


def docker_cli() -> str:
    """Debian's client where it is (it speaks our engine's API 1.41); else the one on PATH."""
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")


def require_images(*images: str) -> None:
    """Skip (fail under CI) unless an engine answers and ``images`` are built."""
    missing: str | None = None
    if not docker_available():
        missing = f"no Docker engine answers at DOCKER_HOST={os.environ.get('DOCKER_HOST') or '(default socket)'}"
    else:
        for image in images or IMAGES:
            if subprocess.run([docker_cli(), "image", "inspect", image], capture_output=True).returncode != 0:
                missing = f"the image {image} is not built (.ci/docker-engine.sh images)"
                break
    if missing is None:
        return
    if require_docker():
        pytest.fail(f"CI=true and {missing}", pytrace=False)
    pytest.skip(f"{missing}: make test starts an engine and builds the images")


def volume_path(name: str) -> Path:
    """Where the engine keeps a named volume's data (the tests read the stores from the host)."""
    out = subprocess.run([docker_cli(), "volume", "inspect", "--format", "{{.Mountpoint}}", name],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())
