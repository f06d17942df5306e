#!/usr/bin/env bash
# Submit the commitlog job to a Spark cluster (standalone, YARN or Kubernetes), shipping the
# project's code (ingest/, sink/, store/) to the driver and the executors as one zip (--py-files).
#
#   deploy/spark-submit.sh [spark-submit options ...] -- COMMITLOG_ARGS ...
#
#   deploy/spark-submit.sh --master spark://host:7077 --driver-memory 4g \
#       -- run --bootstrap-servers kafka:9092 --subscribe events \
#              --store /data/store --checkpoint /data/checkpoint
#
# Everything before `--` goes to spark-submit unchanged; everything after it is the `commitlog`
# command line (deploy/driver.py calls ingest.cli.main with it).
#
# Environment:
#   PYTHON                     python used to build the zip and find pyspark (default: python3)
#   SPARK_HOME                 Spark to submit with (default: the pyspark package of $PYTHON)
#   COMMITLOG_EXECUTOR_PYTHON  python on the executors (spark.pyspark.python); it needs the
#                              project's dependencies (pyspark, numpy, pyarrow, pandas,
#                              kafka-python, crc32c) but NOT the project: that is shipped.
#   COMMITLOG_DRIVER_PYTHON    python of the driver in client mode (default: $PYTHON)
#   COMMITLOG_BUILD_DIR        where the zip is built (default: <repo>/build/deploy)
#   COMMITLOG_DRIVER_SCRIPT    the application file (default: deploy/driver.py; tests put a
#                              probe script here)
#
# Where the store lives: the store is written by the DRIVER. In client mode (the default) that is
# this machine, so --store is a path here. In cluster mode the driver runs on a cluster node or
# pod: mount a persistent volume at the store path on the driver only (see deploy/k8s/). The job
# checks the path at start (ingest.preflight) and refuses memory or container-layer filesystems.
# Standalone clusters do not run Python drivers in cluster mode; use client mode there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-python3}"

submit_args=()
while (( $# )); do
    if [[ "$1" == "--" ]]; then shift; break; fi
    submit_args+=("$1"); shift
done
if (( $# == 0 )); then
    echo "usage: $0 [spark-submit options ...] -- COMMITLOG_ARGS ... (e.g. -- run --store DIR ...)" >&2
    exit 2
fi

if [[ -z "${SPARK_HOME:-}" ]]; then
    SPARK_HOME="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
    export SPARK_HOME
fi

build="${COMMITLOG_BUILD_DIR:-$repo/build/deploy}"
mkdir -p "$build"
zip_path="$build/commitlog_ingest.zip"
# The zip holds the three packages at its root, so `import store` works with it on sys.path.
# Python bytecode caches and tests stay out; the zip is rebuilt on every submit so it always
# matches the checkout being submitted.
"$python" - "$repo" "$zip_path" <<'PY'
import os, sys, zipfile
repo, out = sys.argv[1], sys.argv[2]
tmp = out + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
    for pkg in ("ingest", "sink", "store"):
        root = os.path.join(repo, pkg)
        if not os.path.isfile(os.path.join(root, "__init__.py")):
            sys.exit(f"spark-submit.sh: {root} is not a package; run from a commitlog-ingest checkout")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    z.write(path, os.path.relpath(path, repo))
os.replace(tmp, out)
PY

# The driver JVM also starts Python workers of its own: the one that plans a Python streaming data
# source (our Kafka source) gets neither --py-files nor the driver's sys.path, only the JVM's
# PYTHONPATH. In client mode the zip is a local file, so put it there too; executors still get the
# code only through --py-files.
export PYTHONPATH="$zip_path${PYTHONPATH:+:$PYTHONPATH}"

app="${COMMITLOG_DRIVER_SCRIPT:-$here/driver.py}"
driver_python="${COMMITLOG_DRIVER_PYTHON:-$python}"
conf=(--conf "spark.pyspark.driver.python=$driver_python")
if [[ -n "${COMMITLOG_EXECUTOR_PYTHON:-}" ]]; then
    conf+=(--conf "spark.pyspark.python=$COMMITLOG_EXECUTOR_PYTHON")
fi

exec "$SPARK_HOME/bin/spark-submit" \
    --name "${COMMITLOG_APP_NAME:-commitlog-ingest}" \
    --py-files "$zip_path" \
    "${conf[@]}" \
    "${submit_args[@]}" \
    "$app" "$@"
