# clusterbench: the two commands are `make demo` and `make test`; both do all set-up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PROFILE ?= profiles/local
SNAKEMAKE_ARGS ?=
BENCH_ARGS ?=
STATUS_ARGS ?=
# make test's three pytest workers (pytest-xdist) on the reference machine's 2 cores: the third
# fills the time the others spend waiting on the test clusters (docs/running.md, "The tests in
# detail"); the Slurm tests in one group, the SGE tests in another, each other module in its
# own; the longest groups first, in tests/conftest.py's order (--no-loadscope-reorder);
# TEST_WORKERS= runs the suite in one process
TEST_WORKERS ?= -n 3 --dist loadgroup --no-loadscope-reorder
GPU_CHECK_ARGS ?=
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help setup demo plan status test check check-ddp bench gpu-check lint format report-html clean

help:
	@echo "make demo   set up, then run the whole pipeline (PROFILE=$(PROFILE)) -> results/report/report.pdf"
	@echo "make plan   a dry run (PROFILE=$(PROFILE)), then every training job it would submit (nodes"
	@echo "            x ranks x CPUs x GPUs x runtime), CPU-/GPU-hours requested, jobs per rule,"
	@echo "            and the runs it will skip and why; submits nothing"
	@echo "make status every training of the workflow, a line each: state, job ids, ranks,"
	@echo "            epoch, images/s or tokens/s, time so far and left (STATUS_ARGS=--watch:"
	@echo "            redrawn every 5 s; --configfile F: Snakemake's); writes nothing"
	@echo "make test   set up, then run the whole test suite (starts real Slurm, SGE and ssh hosts)"
	@echo "make check  quick tier while working: lint and the tests that start no cluster and no"
	@echo "            whole pipeline (-m 'not slow and not slurm and not sge and not ssh')"
	@echo "make check-ddp  make check's tests in a venv without Horovod (.venv-ddp): the DDP tier"
	@echo "make setup  only the set-up (venv, torch, snakemake, profiles; horovod where a run of"
	@echo "            the config uses it: HOROVOD=1 or 0 to decide, CONFIG=files to read)"
	@echo "make bench  set up, then benchmark the trainer against hand-written references"
	@echo "            (BENCH_ARGS=--quick for a fast check), and the workflow's own cost with 100,"
	@echo "            1,000 and 5,000 runs (parse, no-op dry run; ratios to plain Snakemake on"
	@echo "            the same job graph) -> benchmarks/results/*.json"
	@echo "make gpu-check  on a machine with a GPU: the GPU tests, bench F5, compile and decode,"
	@echo "            and ResNet-50 (224x224, bf16, channels-last; synthetic, and JPEGs decoded"
	@echo "            on the GPU) through the workflow under both backends; prints images/s, MFU"
	@echo "            and the decode rate (under 10 minutes; GPU_CHECK_ARGS=--cpu-smoke: the"
	@echo "            same steps on the CPU, tiny)"
	@echo "make lint   snakemake --lint, snakefmt --check, ruff"

setup:
	@tools/setup.sh

demo: setup
	snakemake --profile $(PROFILE) $(SNAKEMAKE_ARGS)
	snakemake --profile $(PROFILE) --report results/report/report.html
	@echo "PDF report:  results/report/report.pdf"
	@echo "HTML report: results/report/report.html"

# Snakemake's dry run with the profile (planned for the profile's executor), then the plan made
# from its output (clusterbench.plan): what the profile would submit.
plan: setup
	python -m clusterbench.plan --profile $(PROFILE) -- $(SNAKEMAKE_ARGS)

# Every training of the workflow as it stands (clusterbench.status): it reads the runs' files and
# the scheduler's queue, and writes nothing; no set-up (it runs beside a workflow that is running).
status:
	python -m clusterbench.status $(STATUS_ARGS)

test: setup
	@tools/test-tools.sh
	python -m pytest $(TEST_WORKERS) $(PYTEST_ARGS)

check: lint
	python -m pytest -q $(TEST_WORKERS) -m "not slow and not slurm and not sge and not ssh" $(PYTEST_ARGS)

# The DDP tier: make check's tests in a venv without Horovod (.venv-ddp: .venv's packages but
# Horovod, linked), the tests that need Horovod skipped with the reason (tests/conftest.py).
check-ddp: setup
	python -m tests.venvs without-horovod .venv-ddp
	PATH=$(CURDIR)/.venv-ddp/bin:$$PATH .venv-ddp/bin/python -m pytest -q $(TEST_WORKERS) \
		-m "not slow and not slurm and not sge and not ssh" --ignore tests/test_lint.py $(PYTEST_ARGS)

bench: setup
	python benchmarks/bench.py $(BENCH_ARGS)
	python benchmarks/workflow_scale.py

gpu-check: setup
	python benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

lint: setup
	snakemake --lint
	snakefmt --check Snakefile workflow/Snakefile rules/
	ruff check workflow scripts tests benchmarks
	ruff format --check workflow scripts tests benchmarks

format: setup
	snakefmt Snakefile workflow/Snakefile rules/
	ruff format workflow scripts tests benchmarks
	ruff check --fix workflow scripts tests benchmarks

report-html: setup
	snakemake --profile $(PROFILE) --report results/report/report.html

clean:
	rm -rf results .snakemake .venv-ddp
