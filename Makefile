# Two commands on a fresh Debian 12: `make demo` and `make test`.
# Both install what is missing: apt packages (as root), a venv, the Python packages.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# Everything the suite and the demo use from Debian.
APT_PACKAGES := postgresql tesseract-ocr tesseract-ocr-deu tesseract-ocr-eng ghostscript fonts-dejavu-core \
                python3-venv ca-certificates openssl openssh-client openssh-server lftp curl systemd \
                chromium chromium-driver rclone cadaver slapd

.PHONY: help deps venv lint typecheck test test-fast demo bench deb clean screenshots

help:
	@echo "make demo    run the appliance on an embedded Postgres with sample scans"
	@echo "make test    lint, type-check and run the whole test suite"
	@echo "make bench   run the benchmarks (prints tables)"

deps:
	@scripts/ensure-system-deps.sh $(APT_PACKAGES)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: deps $(VENV)/.installed

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# Two pytest processes: most tests wait for a daemon, a worker or PostgreSQL rather than
# compute, so the suite takes about two thirds of the time on 2 cores. Tests go to
# whichever process is free; the ones that install the .deb share one process
# (xdist_group "dpkg"). TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= 2
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadgroup)

test: lint typecheck
	$(BIN)/pytest -q $(PYTEST_PARALLEL)

# Without the tests marked slow (minutes each).
test-fast: venv
	$(BIN)/pytest -q -m "not slow" $(PYTEST_PARALLEL)

demo: venv
	$(BIN)/python scripts/demo.py

bench: venv
	$(BIN)/python bench/intake.py
	$(BIN)/python bench/sftp.py
	$(BIN)/python bench/queue.py
	$(BIN)/python bench/split.py
	$(BIN)/python bench/audit.py
	$(BIN)/python bench/search.py

# The Debian package: $(DIST)/ingestd_<version>_<arch>.deb (packaging/build-deb.sh says how).
DIST ?= dist
deb: venv
	packaging/build-deb.sh $(DIST)

clean:
	rm -rf $(VENV) .demo .bench .pytest_cache .mypy_cache .ruff_cache *.egg-info dist

# The web console's pictures in the README: taken by its browser test.
screenshots: venv
	INGESTD_SCREENSHOTS=$(CURDIR)/docs/screenshots $(BIN)/pytest -q tests/e2e/test_web_browser.py
