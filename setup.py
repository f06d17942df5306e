"""The compiled parts, both optional: without a C compiler the install still succeeds and the same
bytes come out of the pyarrow/numpy paths, slower. Every pass reads the record layout from
store/format/_layout.h.

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

from setuptools import Extension, setup

CRC32 = "store/format/_crc32.h"    # the CRC-32 two of them share (BODYCRC): libdeflate's, found at load (dlopen), or a table
LAYOUT = "store/format/_layout.h"  # the record and IndexFile layout every pass reads by (constants.py's numbers)
# the index's key finder, file rules and putKey
INDEX_KEYS = ["store/index/_index_keys.h", "store/index/_index_file.h", "store/index/_index_put.h", LAYOUT]
FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]

setup(ext_modules=[
    Extension("ingest.encode._direct_encode", ["ingest/encode/_direct_encode.c"], optional=True, extra_compile_args=FLAGS,
              depends=[CRC32, LAYOUT, "ingest/encode/_direct_record.h"], libraries=["dl"]),
    Extension("store.scan._properties_split", ["store/scan/_properties_split.c"], optional=True,
              extra_compile_args=FLAGS),
    Extension("store.scan._record_check", ["store/scan/_record_check.c"], optional=True,
              extra_compile_args=FLAGS, depends=[CRC32, LAYOUT], libraries=["dl"]),
    Extension("store.scan._record_columns", ["store/scan/_record_columns.c"], optional=True,
              extra_compile_args=FLAGS, depends=[LAYOUT]),
    Extension("store.scan._scan_walk", ["store/scan/_scan_walk.c"], optional=True, extra_compile_args=FLAGS,
              depends=[LAYOUT]),
    Extension("store.index._index_build", ["store/index/_index_build.c"], optional=True, extra_compile_args=FLAGS,
              depends=INDEX_KEYS),
    Extension("store.log._page_probe", ["store/log/_page_probe.c"], optional=True, extra_compile_args=FLAGS),
    Extension("store.index._index_check", ["store/index/_index_check.c"], optional=True, extra_compile_args=FLAGS,
              depends=INDEX_KEYS),
])
