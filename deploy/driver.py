"""The Spark driver's entry point under spark-submit: ``commitlog`` with the same arguments.

spark-submit needs a Python file as the application; this one hands its arguments to the console
script's ``main``, so ``spark-submit driver.py run --store ...`` is ``commitlog run --store ...``
with the master, resources and shipped code coming from spark-submit. The ingest/sink/store
packages come from the driver's copy deploy/spark-submit.sh unpacks (build/deploy/driver, on
PYTHONPATH) or from the image's install.
"""

from __future__ import annotations

import sys

from ingest.cli import main

# Subcommands that build a SparkSession: their --master defaults to local[*], which would override
# the master spark-submit was given, so the driver says "none" (leave it to spark-submit) unless
# the command line names one.
SPARK_COMMANDS = frozenset({"run", "replay"})


def driver_argv(argv: list[str]) -> list[str]:
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in SPARK_COMMANDS and not any(a == "--master" or a.startswith("--master=") for a in argv):
        return [*argv, "--master", "none"]
    return argv


if __name__ == "__main__":
    sys.exit(main(driver_argv(sys.argv[1:])))
