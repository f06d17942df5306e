"""The Spark driver's entry point under spark-submit: ``commitlog`` with the same arguments.

spark-submit needs a Python file as the application; this one only hands its arguments to the
console script's ``main``, so ``spark-submit driver.py run --store ...`` and ``commitlog run
--store ...`` are the same job. The ingest/sink/store packages come from --py-files (the zip that
deploy/spark-submit.sh builds) or from an installed package in the image.
"""

from __future__ import annotations

import sys

from ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
