# yafsdp-bench: `make demo` (CPU sweep -> report) and `make test` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_SWEEP ?= multirun/cpu_demo
DEMO_REPORT ?= reports/cpu_demo

.PHONY: install demo test bench lint clean

install: $(STAMP)

# A torch already in the base interpreter (a GPU cluster's) is kept through
# --system-site-packages; otherwise the CPU build torch==2.13.0 is installed.
$(STAMP): pyproject.toml
	@if python3 -c "import torch" 2>/dev/null; then \
		python3 -m venv --system-site-packages $(VENV); \
	else \
		python3 -m venv $(VENV) && $(VENV)/bin/pip install -q torch==2.13.0; \
	fi
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: install
	$(PY) -m harness -m experiment=cpu_demo hydra.sweep.dir=$(DEMO_SWEEP)
	$(PY) -m harness.report $(DEMO_SWEEP) -o $(DEMO_REPORT)
	@echo "Report: $(DEMO_REPORT)/report.md"

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) -m pytest tests/bench --benchmark-enable --benchmark-only -q -s

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
