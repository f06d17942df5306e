# Everything a fresh machine needs: Python 3.11, Java 17, the package registries (and, as root, apt-get for Prometheus).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv jvm spark-archive prometheus docker test test-fast demo bench-quick clean

# the C passes setup.py builds, and the headers they share
KERNELS := $(wildcard ingest/*/_*.c ingest/*/_*.h store/*/_*.c store/*/_*.h)

$(STAMP): pyproject.toml setup.py $(KERNELS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The JVM jars (deploy/jvm/pom.xml): Apache Kafka, Spark's Kafka connector, RocketMQ 4.9 and 5.
# Maven Central once, then offline: each set is copied again only when the pom changes.
JVM_SETS := kafka spark-kafka rocketmq4 rocketmq5
JVM_STAMPS := $(JVM_SETS:%=deploy/jvm/lib/%/.resolved)

deploy/jvm/lib/%/.resolved: deploy/jvm/pom.xml
	deploy/jvm/resolve.sh $*

jvm: $(JVM_STAMPS)

# The driver JVM's class archive and a Spark home without pyspark.zip (pip's pyspark is imported instead)
# (ingest/spark_archive.py): made once per java, Python and Spark, used by every local job's driver
# and its Python workers, which then start on less CPU; a job without them starts as before.
spark-archive: $(STAMP)
	$(PY) -m ingest.spark_archive

# Prometheus + promtool and strace (Debian's packages) for the metrics and injected-fault tests; skipped
# with a note where apt-get cannot
prometheus:
	@.ci/install-tools.sh

# A Docker engine and the images the container tests run (.ci/docker-engine.sh): the user's engine
# where one answers, else (root, apt-get) Debian's docker.io started privately on a socket of its own,
# host network only; images built locally, each again only when its inputs change. The private engine
# is stopped when `make test` ends; its DOCKER_HOST is given to pytest alone.
DOCKER_ENGINE := .ci/docker-engine.sh

docker: jvm
	@$(DOCKER_ENGINE) start
	@$(DOCKER_ENGINE) images

test: $(STAMP) jvm spark-archive prometheus docker
	@trap '$(DOCKER_ENGINE) stop' EXIT; \
	DOCKER_HOST="$$($(DOCKER_ENGINE) host)" $(PY) -m pytest -q --durations=30 -n 2 --dist loadfile --no-loadscope-reorder

test-fast: $(STAMP)
	$(PY) -m pytest -q -m unit

demo: $(STAMP) jvm spark-archive
	$(PY) -m ingest.devtools.demo

bench-quick: $(STAMP) jvm spark-archive
	for b in store_append index_bound page_cache roll recovery adopt verify pipeline latency replay replay_files codecs index_lookup readback cluster brokers spool costs spark_logs wide bridge; do $(PY) bench/$$b.py --quick || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info demo-store demo-store-checkpoint .docker-engine
	find ingest store -name '_*.so' -delete
