# Two commands for a fresh clone: `make demo` runs the main job, `make test` runs every test tier.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-unit bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/polar-jobs demo

test: $(VENV)/.installed
	$(PY) -m pytest -rs tests

test-unit: $(VENV)/.installed
	$(PY) -m pytest -rs -m unit tests

bench: $(VENV)/.installed
	$(PY) benchmarks/proxy_overhead.py
