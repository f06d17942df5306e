"""Our Kafka source: a PySpark Python data source on kafka-python with Spark's ``kafka`` options
(offsets, admin, fetch, record-batch decoding, read tasks). Knows nothing of RocketMQ: imports no
other package of this project."""
