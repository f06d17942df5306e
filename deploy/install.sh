#!/usr/bin/env bash
# The install steps of the image, kept here so a test can run exactly these steps in a fresh
# virtual environment (tests/test_deploy_install.py) instead of trusting an image nobody built.
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
    # gcc only while pip builds the C kernels (setup.py), removed again below; libdeflate0's CRC-32 is
    # what the kernels compute BODYCRC with when it is there (store/format/_crc32.h)
    apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini libdeflate0 gcc libc6-dev
fi

# A non-editable install: the image (and the test's venv) must work without the checkout.
"$python" -m pip install "$src"

if (( system )); then
    apt-get purge -y --auto-remove gcc libc6-dev
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
from ingest.encode import direct_encode
from store.scan import arrow_text, encoded_check, record_batch, walk
from store.index import build, check
kernel = "built" if direct_encode.available() else "NOT built (no C compiler: the job maps and encodes the slower way)"
store = "built" if arrow_text.kernel_available() and record_batch.columns_kernel_available() \
    and walk.walk_kernel_available() and encoded_check.kernel_available() and build.build_kernel_available() \
    and check.check_kernel_available() \
    else "NOT built (no C compiler: segments are walked, read back, indexed and verified, spool files checked the slower way)"
print(f"commitlog-ingest installed; pyspark {pyspark.__version__}; python {sys.version.split()[0]}; "
      f"C kernel {kernel}; store kernels {store}")
PY
)
if ! java -version >/dev/null 2>&1; then
    echo "install.sh: no 'java' on PATH; Spark needs Java 17 (run with --system, or install it)" >&2
    exit 1
fi
echo "install.sh: done"
