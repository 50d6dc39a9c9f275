# Each target bootstraps .venv itself; the stamp is rebuilt when the dependencies change.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: demo test smoke test-slow test-full typecheck bench g2p docs clean

# PyTorch's build: a wheel already on this machine (pip's find-links) if there is one, else
# PyPI's (CUDA) where an NVIDIA GPU is present, else PyTorch's CPU build (PyPI's Linux
# wheels bring about 3 GB of CUDA libraries a machine without a GPU cannot use).
TORCH     := torch==2.13.0
TORCH_CPU := https://download.pytorch.org/whl/cpu

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first; the constraints keep every later step on it.
	if $(PIP) install -q --no-index --no-deps $(TORCH) >/dev/null 2>&1 \
	        || command -v nvidia-smi >/dev/null 2>&1; then \
	    $(PIP) install -c constraints.txt $(TORCH); \
	else \
	    $(PIP) install -c constraints.txt --index-url $(TORCH_CPU) $(TORCH); \
	fi
	# compat: the checkout on the path by a .pth line, which mypy follows (a user's script
	# type-checks against xpseq); setuptools' default finder hook is invisible to mypy.
	$(PIP) install -c constraints.txt -e ".[dev]" --config-settings editable_mode=compat
	touch $(STAMP)

# The demo needs xpseq and JAX only (its training engine): not the development stack.
DEMO_STAMP := $(VENV)/.demo
$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt -e ".[jax]" --config-settings editable_mode=compat
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/xpseq demo

# Two workers (pytest-xdist): most tests are single-threaded JAX compilations. A file's
# tests stay on one worker (--dist loadfile), so that its module fixtures (a trained model,
# an export) and the JAX programs it caches are made once, not once per worker. On JAX the
# model parity tests compile a covering subset of the 26 configurations (every attention,
# cell and style; numpy, torch and array_api_strict run all 26), and the long checks
# (marked slow) are left to `make test-slow`, to keep the suite under 5 minutes on 2 cores:
# so are the tests whose call was measured at 2 s or more (tests/long_tests.txt, written by
# scripts/split_test_tiers.py). While no test ends for 10 s, a line names those under way.
# `make test-full` (or plain pytest) runs everything and compiles all 26.
test: $(STAMP)
	XPSEQ_JAX_SUBSET=1 $(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow"

# A first check in under 2 minutes on 2 cores (30 s measured): the layout and import layers,
# the model protocol (a model defined in a test trains, saves, reloads and searches), the
# shapes, the search, the README's examples and command lines, the text front end, the
# core's errors and the command's options, on NumPy only.
smoke: $(STAMP)
	XPSEQ_BACKENDS=numpy $(BIN)/python -m pytest -n 2 -m "not slow" -k "not on_jax" \
		tests/test_layout.py tests/test_import_layers.py tests/test_model_protocol.py \
		tests/test_model_checks.py tests/test_shapes.py tests/test_translation.py \
		tests/test_readme.py tests/test_g2p_text.py tests/test_errors.py \
		tests/test_cli_options.py

# The long checks: the benchmarks' harnesses run whole, training over several processes,
# the demo's findings, 200-step bfloat16 parity, torch.compile, the models' forward on
# ndonnx (a covering subset of the configurations; test-full runs all) (.ci/run runs them).
test-slow: $(STAMP)
	XPSEQ_ONNX_SUBSET=1 $(BIN)/python -m pytest -n 2 -m slow

test-full: $(STAMP)
	$(BIN)/python -m pytest -n 2

# The type check (mypy, configured in pyproject.toml: strict on core, models, search and the
# front door); .ci/run runs it after the tests.
typecheck: $(STAMP)
	$(BIN)/python -m mypy

# The documentation site (Sphinx, PyData theme, MyST notebooks executed at every build),
# into docs/_build/html; any warning fails the build.
docs: $(STAMP)
	$(PIP) install -c constraints.txt -e ".[docs]" --config-settings editable_mode=compat
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

# Benchmarks: ratios against native PyTorch, measured in one run (a few minutes; out/bench).
# The documented run adds the peers and keeps its results (--record benchmarks/results), then
# `python -m scripts.bench_page` remakes the pages' figures: see docs/benchmarks.md.
bench: $(STAMP)
	$(BIN)/python -m scripts.bench

# The G2P recipe on the CMU dictionary, stress kept: the LSTM model of seed 1 (98 min on two
# cores), its scores with stress kept and removed, and its copy into the package (beside the
# stress-free model, which `scripts/g2p_recipe.py` with its defaults made: 105 min).
g2p: $(STAMP)
	$(BIN)/python -m scripts.g2p_recipe --stress --runs rnn:1 --minutes 98 --out out/g2p-stress

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache docs/_build docs/_autosummary
