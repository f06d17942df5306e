#!/usr/bin/env bash
# Submit the commitlog job to a Spark cluster (standalone, YARN or Kubernetes), shipping the
# project (ingest/, sink/, store/ and the compiled C kernels: the read tasks' encode pass, the
# segment walk, and the store reader's record columns and properties split) to the executors as
# one archive (--archives, unpacked in each executor's directory), and the same tree unpacked to
# the driver (build/deploy/driver on its PYTHONPATH). The C passes are the implementation: the executors cannot run without them, so a
# kernel that does not build for $PYTHON stops the submit (exit 2) rather than shipping Python alone.
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
#   PYTHON                     python used to build the kernels and find pyspark (default: python3)
#   SPARK_HOME                 Spark to submit with (default: the pyspark package of $PYTHON)
#   COMMITLOG_EXECUTOR_PYTHON  python on the executors (spark.pyspark.python); it needs the
#                              project's dependencies (pyspark, numpy, pyarrow, pandas,
#                              kafka-python, crc32c; pybase64 for replay --from-files at full
#                              speed) but NOT the project: that is shipped.
#   COMMITLOG_DRIVER_PYTHON    python of the driver in client mode (default: $PYTHON)
#   COMMITLOG_BUILD_DIR        where the archive and the driver's copy are built (default: <repo>/build/deploy)
#   COMMITLOG_SHIP             archive, the only value (the code and the kernels, built here for
#                              $PYTHON, so the executors' Python must be the same version and platform)
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
ship="${COMMITLOG_SHIP:-archive}"
if [[ "$ship" == "zip" ]]; then
    echo "spark-submit.sh: COMMITLOG_SHIP=zip is no longer supported: executors need the compiled passes; the archive (the default) ships them" >&2
    exit 2
elif [[ "$ship" != "archive" ]]; then
    echo "spark-submit.sh: COMMITLOG_SHIP is '$ship': archive is the only value" >&2
    exit 2
fi
driver_dir="$build/driver"
archive_path="$build/commitlog_ingest.tar.gz"
# The archive holds the three packages' Python files at its root, so `import store` works with it
# on sys.path, plus the kernels, built here for $PYTHON (the executors' Python must be the same
# version on the same platform: a homogeneous cluster or the image). The driver gets it unpacked:
# Python does not load extension modules from a zip.
# Bytecode caches and tests stay out; both are rebuilt on every submit, so they always match the
# checkout being submitted.
kernel_dir="$build/kernel"
rm -rf "$kernel_dir" "$build/kernel-tmp"
# Built with the extension alone, away from the checkout: setup.py would make setuptools read
# pyproject.toml, whose metadata an older setuptools in the user's Python may refuse.
mkdir -p "$build/kernel-tmp"
if ! (cd "$build/kernel-tmp" && "$python" - "$repo" "$kernel_dir" <<'PY'
import glob, os, sys
from setuptools import Distribution, Extension
repo, build_lib = sys.argv[1:3]
# every kernel of the project: the C files beside the modules that load them (setup.py's list)
sources = sorted(c for pkg in ("ingest", "store") for c in glob.glob(os.path.join(repo, pkg, "*", "_*.c")))
flags = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
exts = [Extension(os.path.relpath(c, repo)[:-2].replace(os.sep, "."), [c], extra_compile_args=flags) for c in sources]
dist = Distribution({"name": "commitlog-kernel", "ext_modules": exts,
                     "script_args": ["build_ext", "--build-lib", build_lib, "--build-temp", "."]})
dist.parse_command_line()
try:
    dist.run_commands()
except Exception as e:    # noqa: BLE001 - the caller shows one line; the compiler's own lines are above it
    cmd = getattr(e.__context__, "cmd", None) or []
    sys.exit(f"error: {cmd[0]} failed on {cmd[cmd.index('-c') + 1]}" if "-c" in cmd else f"error: {e}")
missing = [e.name for e in exts if not glob.glob(os.path.join(build_lib, *e.name.split(".")) + ".*")]
sys.exit(f"not built: {missing}" if missing or not exts else 0)
PY
        ) >"$build/kernel-build.log" 2>&1; then
    # the compiler's first error, else the build's own one-line summary, else the log's last line
    log="$build/kernel-build.log"
    why="$(grep -m1 ': error:' "$log" || grep -m1 '^error:' "$log" || tail -n1 "$log")"
    echo "spark-submit.sh: the C passes do not build for $python ($("$python" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo '?')): ${why:-no output} (full log: $log)" >&2
    exit 2
fi
"$python" - "$repo" "$driver_dir" "$archive_path" "$kernel_dir" <<'PY'
import os, shutil, sys, tarfile
repo, driver_dir, archive_out, kernel_dir = sys.argv[1:5]

def files():
    for pkg in ("ingest", "sink", "store"):
        root = os.path.join(repo, pkg)
        if not os.path.isfile(os.path.join(root, "__init__.py")):
            sys.exit(f"spark-submit.sh: {root} is not a package; run from a commitlog-ingest checkout")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    yield path, os.path.relpath(path, repo)

tmp = archive_out + ".tmp"
with tarfile.open(tmp, "w:gz") as t:
    for path, name in files():
        t.add(path, name)
    for dirpath, _, filenames in sorted(os.walk(kernel_dir)):    # only the built kernels are there
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            t.add(path, os.path.relpath(path, kernel_dir))
os.replace(tmp, archive_out)
# the driver's copy: the same packages and kernels, unpacked (a zip cannot hold importable kernels)
shutil.rmtree(driver_dir, ignore_errors=True)
with tarfile.open(archive_out) as t:
    try:
        t.extractall(driver_dir, filter="data")
    except TypeError:       # a Python before 3.11.4: no filters (the archive is the one just made)
        t.extractall(driver_dir)
PY

# The driver JVM also starts Python workers of its own: the one that plans a Python streaming data
# source (our Kafka source) gets neither --py-files nor the driver's sys.path, only the JVM's
# PYTHONPATH. In client mode the driver's copy is a local directory, so put it there.
export PYTHONPATH="$driver_dir${PYTHONPATH:+:$PYTHONPATH}"
# Python's safe-path mode for every Python process of the job (ingest.spark_session, SAFE_PATH): Spark
# starts its workers with `python -m` in their working directory, which would come first on their
# import path. Here for the client-mode driver and its JVM's planner runners; the confs for a driver
# in the cluster (YARN's application master, a Kubernetes driver pod) and the executors.
export PYTHONSAFEPATH=1

app="${COMMITLOG_DRIVER_SCRIPT:-$here/driver.py}"
driver_python="${COMMITLOG_DRIVER_PYTHON:-$python}"
conf=(--conf "spark.pyspark.driver.python=$driver_python")
if [[ -n "${COMMITLOG_EXECUTOR_PYTHON:-}" ]]; then
    conf+=(--conf "spark.pyspark.python=$COMMITLOG_EXECUTOR_PYTHON")
fi
# Spark unpacks an --archives entry into each executor's working directory under the name after
# '#'; the executors' Python workers start there, so the relative path finds the packages.
# spark-submit keeps only the last --archives it is given, so one of the user's own is joined
# with ours rather than passed beside it.
archives="$archive_path#commitlog_ingest"
rest=()
for (( i = 0; i < ${#submit_args[@]}; i++ )); do
    arg="${submit_args[$i]}"
    if [[ "$arg" == "--archives" && $(( i + 1 )) -lt ${#submit_args[@]} ]]; then
        archives="${submit_args[$((i + 1))]},$archives"; i=$(( i + 1 ))
    elif [[ "$arg" == --archives=* ]]; then
        archives="${arg#--archives=},$archives"
    else
        rest+=("$arg")
    fi
done
submit_args=("${rest[@]}")
ship_args=(--archives "$archives" --conf "spark.executorEnv.PYTHONPATH=commitlog_ingest"
           --conf "spark.executorEnv.PYTHONSAFEPATH=1" --conf "spark.yarn.appMasterEnv.PYTHONSAFEPATH=1"
           --conf "spark.kubernetes.driverEnv.PYTHONSAFEPATH=1")

# Spark's own Kafka source (`run --source spark-kafka`), when `make jvm` resolved it: its jars go to
# the driver and the executors. A user's own --jars comes after ours and wins nothing away from it.
jvm_lib="${COMMITLOG_JVM_LIB:-$here/jvm/lib}"
if [[ -f "$jvm_lib/spark-kafka/.resolved" ]]; then
    jars="$(ls "$jvm_lib"/spark-kafka/*.jar | paste -sd, -)"
    for (( i = 0; i < ${#submit_args[@]}; i++ )); do
        if [[ "${submit_args[$i]}" == "--jars" && $(( i + 1 )) -lt ${#submit_args[@]} ]]; then
            jars="$jars,${submit_args[$((i + 1))]}"; unset 'submit_args[i]' 'submit_args[i+1]'; i=$(( i + 1 ))
        fi
    done
    submit_args=(${submit_args[@]+"${submit_args[@]}"})
    ship_args+=(--jars "$jars")
fi

exec "$SPARK_HOME/bin/spark-submit" \
    --name "${COMMITLOG_APP_NAME:-commitlog-ingest}" \
    "${ship_args[@]}" \
    "${conf[@]}" \
    ${submit_args[@]+"${submit_args[@]}"} \
    "$app" "$@"
