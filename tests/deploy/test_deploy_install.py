"""The image's install steps (deploy/install.sh, what deploy/Dockerfile runs) in a fresh virtual
environment: a plain `python -m venv`, no system site-packages, the project's committed files that
the Dockerfile's COPY lines take, installed non-editable with all its dependencies.

pip takes the dependencies from its cache or the package index, as a `docker build` would (the
pyspark wheel alone is ~450 MB: a cold cache makes this test slow, a warm one ~30 s). The apt-get
step (`--system`) and the image's user and volumes are the image build's (`make test` builds it:
.ci/docker-images.sh; tests/deploy/test_compose.py and tests/deploy/test_cluster_containers.py run it), and
tests/deploy/test_deploy.py checks them as text.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
# What deploy/Dockerfile copies into the build.
IMAGE_SOURCES = ("pyproject.toml", "setup.py", "README.md", "ingest", "sink", "store", "deploy/install.sh")


def export_sources(src: Path) -> None:
    """The image's sources as committed (HEAD), as a build from a clean clone sees them: files
    other developers have not committed yet in this shared checkout stay out. Outside a git
    checkout, the files on disk."""
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD", *IMAGE_SOURCES],
                             capture_output=True)
    if archive.returncode == 0:
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
        return
    for rel in IMAGE_SOURCES:
        source, target = ROOT / rel, src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)


def test_install_sh_installs_a_working_commitlog_into_a_fresh_venv(tmp_path: Path) -> None:
    src = tmp_path / "src"
    export_sources(src)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHON"] = str(py)

    result = subprocess.run(["bash", str(src / "deploy" / "install.sh"), str(src)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=840)
    assert result.returncode == 0, f"install.sh failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    assert "install.sh: done" in result.stdout
    assert "C passes built" in result.stdout, result.stderr[-4000:]

    # The installed console script knows the job, from a directory with no checkout in sight.
    shutil.rmtree(src)
    run_help = subprocess.run([str(venv / "bin" / "commitlog"), "run", "--help"], cwd="/", env=env,
                              capture_output=True, text=True, timeout=120)
    assert run_help.returncode == 0, run_help.stderr
    for option in ("--bootstrap-servers", "--store", "--checkpoint", "--skip-preflight"):
        assert option in run_help.stdout
    where = subprocess.run([str(py), "-c", "import ingest.preflight, sink, store, pyspark; "
                                           "print(store.__file__); print(pyspark.__file__)"],
                           cwd="/", env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    for path in where.stdout.split():
        assert Path(path).is_relative_to(venv), f"{path} is not inside the fresh venv"


def test_install_sh_without_a_c_compiler_says_so_in_one_line(tmp_path: Path) -> None:
    """The C passes are the implementation: no compiler, no install (and nothing half-installed)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update({"PYTHON": str(venv / "bin" / "python"), "CC": str(tmp_path / "no-such-cc")})
    result = subprocess.run(["bash", str(ROOT / "deploy" / "install.sh"), str(ROOT)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout[-2000:]
    assert result.stderr.splitlines() == [
        f"install.sh: the C passes cannot be built: no C compiler ({tmp_path / 'no-such-cc'} is not on PATH): "
        "install one (Debian: apt-get install gcc libc6-dev, or run with --system)"]
    assert "pip" not in result.stdout
