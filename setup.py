"""The compiled passes: they are the implementation (no Python fallback), so the install needs a C
compiler and Python's headers and stops with one line naming what is missing without them. Every
pass reads the record layout from store/format/_layout.h.

- ingest/encode/_direct_encode.c: Kafka record batches (and Kafka rows in Arrow columns) straight to CommitLog records
  (ingest/encode/direct_encode.py).
- store/scan/_scan_walk.c: the segment walk along TOTALSIZE (store/scan/walk.py, for record_check.py:
  recovery, verify, the read-back).
- store/scan/_record_check.c: the record checks in one pass: of records encoded elsewhere before the
  store takes them (store/scan/encoded_check.py: the spool files the driver maps), and of a segment
  walked and checked at once with the fields verify needs (store/scan/record_check.py).
- store/scan/_record_columns.c and store/scan/_properties_split.c: the fixed fields, hosts,
  topics and bodies, and the PROPERTIES split into pairs, of many records when a store is read back
  as Arrow (store/scan/record_batch.py, store/scan/arrow_text.py).
- store/index/_index_build.c: the index's keys found and put as the append writes
  (store/index/build.py, store/index/file.py).
- store/log/_page_probe.c: whether the pages of a mapped range can be read, a SIGBUS caught (a file
  truncated under a reader, EIO from the disk), for store/log/segment.py's check_readable.
- store/index/_index_check.c: verify's comparison of a healthy index with the commit log and of each
  IndexFile's chains with its slots (store/index/check.py); any difference goes to the numpy checks.
"""

import os
import shlex
import shutil
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def missing_toolchain() -> str | None:
    """What a build of the passes lacks, as one line naming the Debian package that brings it."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    if not shutil.which(cc):
        return f"no C compiler ({cc} is not on PATH): install one (Debian: apt-get install gcc libc6-dev)"
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return f"no Python.h in {include}: install Python's headers (Debian: apt-get install python3-dev)"
    return None


class BuildPasses(build_ext):
    """build_ext that says in one line what is missing before the compiler's first error would."""

    def run(self) -> None:
        missing = missing_toolchain()
        if missing:
            raise SystemExit(f"setup.py: the C passes cannot be built: {missing}")
        super().run()


CRC32 = "store/format/_crc32.h"    # the CRC-32 two of them share (BODYCRC): libdeflate's, found at load (dlopen), or a table
LAYOUT = "store/format/_layout.h"  # the record and IndexFile layout every pass reads by (constants.py's numbers)
TEXT = "store/format/_text.h"      # UTF-8, String.hashCode and the property pieces, as Java and RocketMQ have them
# the index's key finder, file rules and putKey
INDEX_KEYS = ["store/index/_index_keys.h", "store/index/_index_file.h", "store/index/_index_put.h", LAYOUT, TEXT]
FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]

setup(cmdclass={"build_ext": BuildPasses}, ext_modules=[
    Extension("ingest.encode._direct_encode", ["ingest/encode/_direct_encode.c"], extra_compile_args=FLAGS,
              depends=[CRC32, LAYOUT, TEXT, "ingest/encode/_direct_record.h"], libraries=["dl"]),
    Extension("store.scan._properties_split", ["store/scan/_properties_split.c"],
              extra_compile_args=FLAGS, depends=[LAYOUT, TEXT]),
    Extension("store.scan._record_check", ["store/scan/_record_check.c"],
              extra_compile_args=FLAGS, depends=[CRC32, LAYOUT, TEXT], libraries=["dl"]),
    Extension("store.scan._record_columns", ["store/scan/_record_columns.c"],
              extra_compile_args=FLAGS, depends=[LAYOUT]),
    Extension("store.scan._scan_walk", ["store/scan/_scan_walk.c"], extra_compile_args=FLAGS,
              depends=[LAYOUT]),
    Extension("store.index._index_build", ["store/index/_index_build.c"], extra_compile_args=FLAGS,
              depends=INDEX_KEYS),
    Extension("store.log._page_probe", ["store/log/_page_probe.c"], extra_compile_args=FLAGS),
    Extension("store.index._index_check", ["store/index/_index_check.c"], extra_compile_args=FLAGS,
              depends=INDEX_KEYS),
])
