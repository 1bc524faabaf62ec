# yafsdp-bench: `make demo` (CPU sweep -> report) and `make test` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_SWEEP ?= multirun/cpu_demo
DEMO_REPORT ?= $(DEMO_SWEEP)/report
# The committed sample report; only `make sample-report` writes it.
SAMPLE_REPORT := reports/cpu_demo
# The planner's probe caches (XDG_CACHE_HOME, else ~/.cache).
CACHE_DIR := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/yafsdp-bench
# pytest-xdist workers for `make test` and `make test-fast` (tests/conftest.py says why 3).
TEST_WORKERS ?= 3

.PHONY: install install-torch demo sample-report notebooks test test-fast bench lint check clean gpu-wheels gpu-check

install: $(STAMP)

# Where torch comes from when the base interpreter has none. On Linux x86_64 the public
# index serves the CUDA build (and GBs of nvidia-* wheels), so a machine without nvidia-smi
# takes the CPU wheel index; with nvidia-smi, pip's own index. Override with
# TORCH_INDEX=<url> (empty: pip's own index). If TORCH_INDEX cannot serve torch (a machine
# that reaches only a mirror), pip's own index is used, with a warning.
TORCH_VERSION ?= 2.13.0
TORCH_SPEC ?= torch==$(TORCH_VERSION)
CPU_TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,$(CPU_TORCH_INDEX))

# A torch already in the base interpreter (a GPU cluster's) is kept through
# --system-site-packages; otherwise torch==$(TORCH_VERSION) is installed (install-torch).
$(STAMP): pyproject.toml
	@if python3 -c "import torch" 2>/dev/null; then \
		python3 -m venv --system-site-packages $(VENV); \
	else \
		python3 -m venv $(VENV) && $(MAKE) --no-print-directory install-torch; \
	fi
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e ".[dev]"
	touch $(STAMP)

install-torch:
	@if [ -z "$(TORCH_INDEX)" ]; then \
		echo "installing $(TORCH_SPEC) from pip's own index"; \
		$(VENV)/bin/pip install -q "$(TORCH_SPEC)"; \
	else \
		echo "installing $(TORCH_SPEC) from $(TORCH_INDEX)"; \
		$(VENV)/bin/pip install -q --timeout 20 --retries 1 --index-url "$(TORCH_INDEX)" \
			"$(TORCH_SPEC)" || { \
		echo "[make install] warning: $(TORCH_INDEX) did not serve $(TORCH_SPEC); using pip's own index (on Linux x86_64 the public one serves the CUDA build: set TORCH_INDEX to a CPU wheel index)" >&2; \
		$(VENV)/bin/pip install -q "$(TORCH_SPEC)"; }; \
	fi

# One line per job and a summary (rank output is in each job's ranks/rank<r>.log). The sweep
# and its report go under multirun/, which git ignores, so a clone stays clean.
demo: install
	@$(PY) -m harness -m experiment=cpu_demo hydra.sweep.dir=$(DEMO_SWEEP)
	@$(PY) -m harness.report $(DEMO_SWEEP) -o $(DEMO_REPORT)

# Refresh the committed sample report (reports/cpu_demo) from a fresh demo sweep.
sample-report:
	$(MAKE) demo DEMO_SWEEP=multirun/sample_report DEMO_REPORT=$(SAMPLE_REPORT)

# Both notebooks executed on the last sweep under multirun/ (or SWEEP_DIR=<sweep>), as
# HTML under outputs/notebooks/, which git ignores.
NOTEBOOK_OUT ?= outputs/notebooks
notebooks: install
	@sweep="$${SWEEP_DIR:-$$($(PY) -m harness.results.latest multirun)}" && test -n "$$sweep" && \
	echo "notebooks on $$sweep" && mkdir -p $(NOTEBOOK_OUT) && \
	for nb in sweep_results trace_inspection; do \
		SWEEP_DIR="$$sweep" $(VENV)/bin/jupytext --to ipynb --execute \
			-o $(NOTEBOOK_OUT)/$$nb.ipynb notebooks/$$nb.py && \
		$(VENV)/bin/jupyter nbconvert --to html --log-level WARN $(NOTEBOOK_OUT)/$$nb.ipynb && \
		echo "$(NOTEBOOK_OUT)/$$nb.html" || exit 1; \
	done

# Everything (CI): unit tests, the multi-process end-to-end runs (@pytest.mark.slow), the
# notebooks; the names of the slowest tests at the end.
test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=15

# The unit tests alone: no test marked slow (those start ranks or whole sweeps).
test-fast: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not slow" \
		--durations=10

# Each benchmark prints its result as it finishes (tests/bench/conftest.py).
bench: install
	$(PY) -m pytest tests/bench --benchmark-enable --benchmark-only -q -s

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The gate CI runs before the tests: lint, formatting, and types of harness/ and yafsdp_impl/.
check: lint
	$(VENV)/bin/mypy

# ---- gpu-check on a GPU node (Python 3.12, torch with CUDA, maybe no network) -------------
# `make gpu-wheels` (where there is network and the git clone) fetches the pure-Python
# packages the node lacks into wheels/, with the clone's revision; copy the tree with
# wheels/ there and run `make gpu-check`: suites A, B, D, S, then C, which takes what is left
# of the run's deadline (540 s by default: one 10-minute command, with the install and
# start). The wheels are installed with --no-deps into a folder of their own, so the
# node's torch is never touched.
WHEELS ?= wheels
GPU_SITE ?= .gpu-site
GPU_PYTHON ?= $(shell [ -x $(PY) ] && echo $(PY) || echo python3)
GPU_CHECK_ARGS ?=
# model_impl=hf: what importing transformers and building a model from a config needs.
# Its other declared dependencies (tokenizers, typer, click, hf-xet, anyio) are imported
# only for tokenizers, the CLI, hub transfers or async clients, so they are left out;
# filelock, fsspec and typing-extensions come with the machine's torch, numpy and
# packaging are installed there too.
HF_WHEEL_PINS := transformers==5.23.0 huggingface-hub==2.4.0 tqdm==4.70.1 \
	httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 idna==3.20 truststore==0.10.5
GPU_WHEEL_PINS := hydra-core==1.3.8 omegaconf==2.3.1 submitit==1.5.4 \
	HolisticTraceAnalysis==0.5.0 plotly==7.1.0 pydot==4.0.1 $(HF_WHEEL_PINS)
# Compiled, so fetched for CPython 3.12 on manylinux x86_64; PyYAML serves omegaconf too.
GPU_BINARY_PINS := pyyaml==6.0.3 regex==2026.11.15 safetensors==0.8.0
GPU_PLATFORMS := --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
	--platform manylinux_2_28_x86_64
ANTLR_PIN := antlr4-python3-runtime==4.9.3  # published as a source archive only

gpu-wheels:
	rm -rf $(WHEELS) && mkdir -p $(WHEELS)
	git rev-parse --short=12 HEAD > $(WHEELS)/REVISION  # the copy carried there has no .git
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		-d $(WHEELS) $(GPU_WHEEL_PINS)
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		$(GPU_PLATFORMS) --implementation cp --abi cp312 -d $(WHEELS) $(GPU_BINARY_PINS)
	python3 -m pip wheel -q --no-deps -w $(WHEELS) $(ANTLR_PIN)
	@du -sh $(WHEELS) && ls $(WHEELS)

gpu-check:
	if ls $(WHEELS)/*.whl >/dev/null 2>&1; then \
		$(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
			--upgrade --target $(GPU_SITE) $(WHEELS)/*.whl; \
	fi
	HARNESS_GIT_REVISION="$${HARNESS_GIT_REVISION:-$$(git rev-parse --short=12 HEAD 2>/dev/null \
		|| cat $(WHEELS)/REVISION 2>/dev/null)}" \
	PYTHONPATH="$(CURDIR)/$(GPU_SITE):$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" \
		$(GPU_PYTHON) -m harness.gpucheck $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache $(GPU_SITE) $(CACHE_DIR)
