"""The streaming job: the Kafka source (kafka/), Kafka records to CommitLog records (encode/), the
replay of history (replay/), the Spark source of a store read back (readback/), and at this level the
job, its settings and the command line; devtools/ holds what development runs and the job never does
(the demo, the embedded brokers). Imports sink, store's public face, store.format and store.scan."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

DISTRIBUTION = "commitlog-ingest"


def version() -> str:
    """This release's version, as the installed package's metadata says (pyproject.toml's), or
    ``unknown`` where the packages are imported from a directory without being installed (the
    driver tree deploy/spark-submit.sh ships)."""
    try:
        return _installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"
