# Everything a fresh machine needs: Python 3.11, Java 17, the package registries.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv test test-fast demo bench-quick clean

# the C passes setup.py builds
KERNELS := $(wildcard ingest/*/_*.c store/*/_*.c)

$(STAMP): pyproject.toml setup.py $(KERNELS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m unit

demo: $(STAMP)
	$(PY) -m ingest.demo

bench-quick: $(STAMP)
	for b in store_append roll recovery verify pipeline replay replay_files codecs index_lookup readback cluster; do $(PY) bench/$$b.py --quick || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info demo-store demo-store-checkpoint
	find ingest store -name '_*.so' -delete
