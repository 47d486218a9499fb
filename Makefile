# perfdiff — every target sets itself up from a fresh clone (only python3 needed).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SHARED ?= ../shared

.PHONY: help demo test test-timing bench lint clean examples fuzz sanitize adapters-check gpu-check

help:  ## List the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml setup.py src/perfdiff/importers/kineto/_scan.c src/perfdiff/importers/nsys/_pages.c src/perfdiff/model/_nesting.c  # C sources: rebuilt on change
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m compileall -q src/perfdiff  # bytecode, as pip writes for an installed package
	touch $(STAMP)

demo: $(STAMP)  ## Compare the shipped example pair and write report.md (+ report.json)
	$(PY) -m perfdiff compare examples/cpufreq/normal examples/cpufreq/abnormal -o report.md --json report.json
	@echo "wrote report.md (+ its pictures and cycles CSV) and report.json"

test: $(STAMP)  ## Run all tests (unit, golden, real traces, fake GPUs in parallel; then live host runs alone)
	$(PY) -m pytest -q -n 2 --durations=10 -m "not live"
	$(PY) -m pytest -q --durations=5 -m "live and not timing"

test-timing: $(STAMP)  ## Run the live tests that compare runs taken one after another (an idle machine)
	$(PY) -m pytest -q -m timing

bench: $(STAMP)  ## Measure compare/import time and memory on large generated inputs
	$(PY) bench/run_bench.py --shared $(SHARED)

fuzz: $(STAMP)  ## Fuzz the trace importers: 10,000 seeded cases against the reference readers
	$(PY) tools/fuzz.py --cases 10000 --seed 0 --shared $(SHARED)

sanitize: $(STAMP)  ## The C extensions' tests (Kineto decoder, nsys record decoder, nesting walk) under ASan and UBSan (needs gcc)
	tools/sanitize.sh $(PY)

lint: $(STAMP)  ## Static checks: ruff, and the import layering contracts of .importlinter
	$(VENV)/bin/ruff check src collectors tests tools bench
	$(PY) tools/lint_layers.py

clean:  ## Remove the virtual environment and build outputs
	rm -rf $(VENV) build dist src/*.egg-info bench/out src/perfdiff/importers/kineto/*.so

examples: $(STAMP)  ## Regenerate the shipped example pair and its report (then UPDATE_GOLDEN=1 make test)
	$(PY) examples/generate_cpufreq.py examples/cpufreq
	$(PY) -m perfdiff compare examples/cpufreq/normal examples/cpufreq/abnormal -o examples/cpufreq/report.md --json examples/cpufreq/report.json
	$(PY) -m perfdiff compare examples/contention/normal examples/contention/abnormal -o examples/contention/report.md --json examples/contention/report.json

adapters-check: $(STAMP)  ## Check the adapters against released vLLM/SGLang/PyTorch sources (needs the package index)
	$(PY) tools/adapters_check.py
	@if $(PY) tools/adapters_check.py --only sglang==0.5.23 --plant sglang:Scheduler.run_batch=forward_batch >/dev/null; \
	then echo "adapters-check: a planted rename was NOT caught"; exit 1; \
	else echo "adapters-check: a planted rename (Scheduler.run_batch) fails the check, as it must"; fi

gpu-check: $(STAMP)  ## On a GPU machine: collectors, verdicts and the agent's overhead on a real training loop (< 8 min)
	$(PY) tools/gpu_check.py
