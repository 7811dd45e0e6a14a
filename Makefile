# bertkit: `make run` does the main job, `make test` runs the tests; both set up .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: setup run test lint bench clean

# Installs into .venv with the pinned versions (constraints.txt pins torch==2.13.0, the CPU wheel).
setup: $(VENV)/.setup-stamp
$(VENV)/.setup-stamp: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	touch $@

# --overwrite: a rerun replaces the previous run's results in runs/demo (bertkit refuses that unless told)
run: setup
	$(VENV)/bin/bertkit demo --overwrite

test: lint
	$(PY) -m pytest -q -n 2 --dist loadgroup

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

bench: setup
	$(PY) benchmarks/bench_inference.py
	$(PY) benchmarks/bench_tokenizer.py
	$(PY) benchmarks/bench_pretrain.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
