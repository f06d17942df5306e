"""What development runs and the job never does: ``make demo`` (demo.py) and the embedded Kafka brokers
(broker/) that ``commitlog broker``, the tests and the benchmarks start. No module of the job imports
this package; the console script loads it inside the ``broker`` subcommand only (tests/house/test_layout.py)."""
