#!/usr/bin/env bash
# The install steps of the image, kept here so a test can run exactly these steps in a fresh
# virtual environment (tests/deploy/test_deploy_install.py) instead of trusting an image nobody built.
#
#   deploy/install.sh [--system] [SOURCE_DIR]
#
#   --system     also install the OS packages (Debian bookworm: Java 17 for Spark, procps for
#                Spark's launch scripts). Needs root; the Dockerfile uses it, the test does not.
#   SOURCE_DIR   the project checkout (default: this script's parent directory).
#   $PYTHON      the interpreter to install into (default: python3). Point it at a venv's python.
set -euo pipefail

system=0
if [[ "${1:-}" == "--system" ]]; then system=1; shift; fi
src="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)"  # absolute: pip reads a bare name as a package
python="${PYTHON:-python3}"

if (( system )); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    # gcc stays: the C passes are the implementation, and spark-submit.sh run from the image compiles
    # them for the executors it ships to; libdeflate0's CRC-32 is what the passes compute BODYCRC with
    # when it is there (store/format/_crc32.h)
    apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini libdeflate0 gcc libc6-dev
fi

# The C passes are the implementation (no Python fallback): say in one line what the build lacks
# before pip's screenful would.
missing="$("$python" - <<'PY'
import os, shlex, shutil, sysconfig
cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
include = sysconfig.get_paths()["include"]
if not shutil.which(cc):
    print(f"no C compiler ({cc} is not on PATH): install one (Debian: apt-get install gcc libc6-dev, or run with --system)")
elif not os.path.isfile(os.path.join(include, "Python.h")):
    print(f"no Python.h in {include}: install Python's headers (Debian: apt-get install python3-dev)")
PY
)"
if [[ -n "$missing" ]]; then
    echo "install.sh: the C passes cannot be built: $missing" >&2
    exit 2
fi

# A non-editable install: the image (and the test's venv) must work without the checkout.
"$python" -m pip install "$src"

if (( system )); then
    rm -rf /var/lib/apt/lists/*
fi

# Smoke checks: the console script starts, the store/sink/ingest packages import from the
# install (not from a checkout on sys.path), and Java is there for Spark.
bindir="$(dirname "$("$python" -c 'import sys; print(sys.executable)')")"
"$bindir/commitlog" --help >/dev/null
(cd / && "$python" - <<'PY'
import importlib, os, sys
for name in ("ingest", "sink", "store", "ingest.preflight"):
    mod = importlib.import_module(name)
    if "site-packages" not in (mod.__file__ or ""):
        sys.exit(f"{name} imported from {mod.__file__}, not from the installed package")
import pyspark
# the compiled passes: an install without them is not a working one
for name in ("ingest.encode._direct_encode", "store.scan._properties_split", "store.scan._record_check",
             "store.scan._record_columns", "store.scan._scan_walk", "store.index._index_build",
             "store.index._index_check", "store.log._page_probe"):
    importlib.import_module(name)
print(f"commitlog-ingest installed; pyspark {pyspark.__version__}; python {sys.version.split()[0]}; C passes built")
PY
)
if ! java -version >/dev/null 2>&1; then
    echo "install.sh: no 'java' on PATH; Spark needs Java 17 (run with --system, or install it)" >&2
    exit 1
fi
echo "install.sh: done"
