# Every target bootstraps the virtual environment it needs; the stamp file
# makes the second run instant and a pyproject.toml change re-installs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-unit test-wheel wheel run-worker migrate bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test,dev,flask,django]'
	touch $(STAMP)

# Every test, in TEST_WORKERS pytest-xdist processes (each starts its own Postgres).
# 3 on 2 cores: the suite waits on subprocesses, sockets and sleeps as much as it
# computes (its fast part, measured back to back on a busy machine: 232 s with 2
# workers, 154 s with 3, 206 s with 4). `--dist loadgroup` keeps the tests that share
# the loaded OCR model on one worker. pytest's exit 5 (no test collected) fails the
# target with a plain message.
TEST_WORKERS ?= 3
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || { \
	  status=$$?; [ $$status -ne 5 ] || echo "make test: pytest collected no test" >&2; \
	  exit $$status; }

# The unit tests alone: no database, seconds.
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

# Builds the wheel, installs it with its dependencies into fresh virtualenvs
# outside the checkout, and runs it there (tests/wheel/): migrate, a Flask host
# laid out like the Mega-Tutorial and a startproject Django host, each adding
# pages, running the worker and asking the admin, also in a schema of their own
# and through PgBouncer. Most of its time is pip installing three virtualenvs.
test-wheel: $(STAMP)
	WHEEL_TEST=1 $(PY) -m pytest tests/wheel $(PYTEST_ARGS)

# The wheel a host installs (docs/embedding.md, "Install"), built into dist/. Building
# needs pip alone (it fetches setuptools into an isolated build environment), in a
# virtualenv of its own: not the development one, with its test and web extras.
BUILD_VENV ?= .venv-build
wheel:
	test -x $(BUILD_VENV)/bin/python || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip wheel --quiet --no-deps --wheel-dir dist .
	@ls -1 dist/manga_page_analysis-*.whl

run-worker: $(STAMP)
	$(PY) -m manga_page_analysis run-worker

# The sample manga analysed by the in-process OCR: no model server needed.
.PHONY: demo
demo: $(STAMP)
	$(PY) -m manga_page_analysis demo

# Measures the `ocr` analyzer on a folder of images with a ground_truth.json (docs/ocr.md).
.PHONY: eval-ocr
eval-ocr: $(STAMP)
	@test -n "$(DATA)" || { echo "usage: make eval-ocr DATA=<folder with ground_truth.json>"; exit 2; }
	$(PY) -m bench.ocr_eval $(DATA) $(EVAL_ARGS)

migrate: $(STAMP)
	$(PY) -m manga_page_analysis migrate

# PEERS=1 also measures PGQueuer and procrastinate (the optional `bench` extra), PEERS=pgqueuer only the one named;
# PGBOUNCER=1 also 1-8 worker processes through PgBouncer vs direct (docs/scaling.md).
bench: $(STAMP)
	if [ -n "$(PEERS)" ]; then $(PY) -m pip install --quiet -e '.[bench]'; fi
	BENCH_PEERS=$(PEERS) BENCH_PGBOUNCER=$(PGBOUNCER) $(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check manga_page_analysis tests testbed bench alembic examples setup.py
	$(VENV)/bin/ruff format --check manga_page_analysis tests testbed bench alembic examples setup.py
	$(VENV)/bin/mypy manga_page_analysis examples/sample_manga/make_sample_pages.py setup.py

clean:
	rm -rf $(VENV) $(BUILD_VENV) .pytest_cache .mypy_cache .ruff_cache
