"""Programs some tests drive (strace), which `make test` installs where it can (.ci/install-tools.sh):
without one a test skips saying so, except under CI, where it must run and its absence is a failure."""

from __future__ import annotations

import os
import shutil

import pytest


def require_program(name: str, purpose: str) -> None:
    """Skip (fail under CI=true) unless ``name`` is on PATH; ``purpose`` says what the test needs it for."""
    if shutil.which(name) is not None:
        return
    missing = f"needs {name} (apt-get install {name}, .ci/install-tools.sh) {purpose}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the test {missing}", pytrace=False)
    pytest.skip(missing)
