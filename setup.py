"""The one compiled part: ingest/encode/_direct_encode.c (Kafka record batches straight to CommitLog
records, see ingest/encode/direct_encode.py). Optional: without a C compiler the install still succeeds
and the job maps and encodes with pyarrow/numpy alone (slower, same bytes)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ingest.encode._direct_encode", ["ingest/encode/_direct_encode.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])])
