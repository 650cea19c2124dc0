# Autograd Lab -- two commands: `make lab` (open the course) and `make test` (check it).
# Each sets itself up on a fresh machine: a local virtual environment and the pinned
# packages (a CPU build of PyTorch; graphviz-pure, which lays the graphs out: no system Graphviz).

PYTHON      ?= python3
VENV        ?= .venv
# Where PyTorch comes from. The CPU index (whose builds, tagged +cpu, pip prefers over PyPI's same
# version) keeps the install small; for a GPU build use
# e.g. `make lab TORCH_INDEX=https://download.pytorch.org/whl/cu128` (see README). TORCH_INDEX= (empty)
# takes PyPI's default build, what `pip install torch` gives.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# One lock for every supported Python (tools/lock.py); CONSTRAINTS=/dev/null installs the newest releases.
CONSTRAINTS ?= constraints.txt
PORT        ?= 8888
JOBS        ?= 2

BIN   := $(VENV)/bin
PY    := $(BIN)/python
# What each audience installs: a learner needs the course only; `make test` adds the test tools and the
# instructor's classroom tools (nbgrader, slides).
LEARNER := $(VENV)/.installed-learner
TESTER  := $(VENV)/.installed-test
PIP     := $(PY) -m pip install --disable-pip-version-check -c $(CONSTRAINTS)
# Everything after torch: uv where it can (it downloads in parallel), pip where it cannot (tools/install.py).
INSTALL := $(PY) -m tools install -c $(CONSTRAINTS)

.PHONY: chromium hub test-hub lab test test-fast test-browser test-package test-pythons notebooks setup setup-test graphviz bench lock clean help \
        soak \
        student handouts python-check test-cuda gpu-wheels

# `make help` lists every target whose line ends in a "## what it does" comment, in the Makefile's order
# (CONTRIBUTING.md lists the same targets; tests/tools/test_lists_in_step.py keeps the two in step).
help:
	@awk -F':[^#]*## ' '/^[a-z][a-z-]*:.*## / {printf "make %-14s %s\n", $$1, $$2}' $(firstword $(MAKEFILE_LIST))

# One clear line instead of a resolver error on a Python the course does not support.
python-check:
	@$(PYTHON) tools/python_check.py

$(PY):
	@$(MAKE) --no-print-directory python-check
	$(PYTHON) -m venv $(VENV)

# torch first: only this call looks at TORCH_INDEX (every package looked up there costs a request). uv, which
# installs the rest (tools/install.py pins it), comes in the same call: a pip run of its own takes seconds.
# torch's byte-code is compiled while the install that follows runs (tools/install.py).
INSTALL_TORCH = @$(PY) -c "import torch" 2>/dev/null || \
	  $(PIP) torch "$$($(PY) -c 'from tools.install import UV; print(UV)')" \
	  $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) --retries 1 --no-compile

$(LEARNER): pyproject.toml $(CONSTRAINTS) | $(PY)
	$(INSTALL_TORCH)
	$(INSTALL) -e .
	@$(PY) -m tools lab-settings $(VENV)
	@touch $@

# The tester's packages include the learner's: one install for both (a second one resolves everything again
# and rebuilds the editable install), and the learner's set-up is then done too.
$(TESTER): pyproject.toml $(CONSTRAINTS) | $(PY)
	$(INSTALL_TORCH)
	$(INSTALL) -e ".[test,classroom]"
	@$(PY) -m tools lab-settings $(VENV)
	@$(PY) -c "import nbgrader" 2>/dev/null || \
	  echo "NOTE: nbgrader needs Python 3.11+; on $$($(PY) -V) the classroom tests are skipped (the course itself runs)."
	@touch $@ $(LEARNER)

# The class on JupyterHub: its own extra and the proxy from npm, never part of a learner's install.
HUB_INSTALLED := $(VENV)/.installed-hub
$(HUB_INSTALLED): $(TESTER) tools/hub/proxy/package-lock.json
	$(INSTALL) -e ".[test,classroom,hub]"
	npm ci --prefix tools/hub/proxy --no-fund --no-audit
	@touch $@

# The graphs' layout engine comes with the packages; this only says what to do where none works (never stops).
setup: $(LEARNER) ## the learner's packages in .venv (torch, JupyterLab, the layout engine); every target runs it first
	@$(PY) -m tools graphviz --warn-only
setup-test: $(TESTER)
	@$(PY) -m tools graphviz --warn-only

# A system Graphviz `dot`, for AUTOGRAD_LAB_DOT=dot and the engines' cross-check (root on Debian installs it).
graphviz: $(LEARNER) ## a system Graphviz dot (root on Debian), for AUTOGRAD_LAB_DOT=dot and the engines' cross-check
	@$(PY) -m tools graphviz --system

# The learner works in their own copy (COURSE, ignored by git): outputs cleared, solutions beside it. Run
# again, it adds what is new and never overwrites a notebook they changed (helpers/autograd_lab/course.py).
COURSE ?= my-course
lab: setup ## set up, make or update your copy in my-course/, open JupyterLab on it
	$(PY) -m autograd_lab $(COURSE) --port $(PORT) -- $(LAB_ARGS)

chromium: ## the browser tests' Chromium (apt-get as root on Debian; elsewhere the command to run)
	@$(PY) -m tools chromium

# The browser tests run beside the rest (tools/run_tests.py; SERIAL=1 runs them after it, output live).
test: setup-test chromium ## set up, then every test: unit tests, nbval on every notebook, browser tests beside them
	$(PY) -m tools test --jobs $(JOBS) $(if $(SERIAL),--serial)

# The unit tests and nbval without the slow tests (tools/run_tests.py says what each suite selects).
test-fast: setup-test ## the unit tests and nbval, without the slow tests and the browser tests
	$(PY) -m tools test --fast --jobs $(JOBS)

test-browser: setup-test chromium ## only the browser tests (real JupyterLab in headless Chromium)
	$(PY) -m pytest -m browser tests/browser

# The wheel, installed into a fresh venv that has only torch, makes a copy and runs a notebook (a few minutes).
test-package: setup-test ## the wheel into a fresh venv that has only torch: no torch reinstalled, its copy's notebook runs
	$(PY) -m pytest -m package -n 0 tests

notebooks: setup-test ## re-execute every notebook in a fresh kernel and save it (one: NB=notebooks/NN_x.ipynb)
	$(PY) -m tools notebooks $(or $(NB),notebooks/*.ipynb)

hub: $(HUB_INSTALLED) ## a class on JupyterHub on this machine (loopback; tools/hub/README.md)
	$(NEEDS_NBGRADER)
	$(PY) tools/hub/hub.py start

# The class on JupyterHub, then nbgrader's round trip of every notebook (make test grades one).
test-hub: $(HUB_INSTALLED) chromium ## the nbgrader assignment flow on JupyterHub (two students in Chromium), then every notebook's autograde
	$(NEEDS_NBGRADER)
	$(PY) -m pytest -m hub -n 0 tests/hub
	$(PY) -m pytest -n 0 tests/tools/test_autograde.py

bench: setup-test ## measure notebook cost, widget latency and the course's figures at scale (docs/performance.md)
	$(PY) -m tools bench

# The course on a CUDA GPU (tools/run_cuda_tests.py). torch must be a CUDA build: in a fresh clone,
# make test-cuda TORCH_INDEX=https://download.pytorch.org/whl/cu128 (README > On a GPU).
test-cuda: setup-test ## on a CUDA GPU: the tests' CUDA cases and nbval with the kernels on the GPU (fails without one)
	$(PY) -m tools test-cuda --jobs $(JOBS)

# The wheels a GPU machine without network lacks for test-cuda and bench's CUDA part (tools/gpu/check.sh runs there).
gpu-wheels: setup-test ## download into .whl/ what a GPU machine without network lacks (tools/gpu/check.sh)
	$(PY) -m tools gpu-wheels

# Headless runs with the ecosystem's tools and their defaults, the machine kept busy (tools/soak.py).
SOAK_OPTS ?=
soak: setup-test ## every notebook by nbconvert and papermill, many runs in a row on a busy machine (SOAK_OPTS=--short: CI's)
	$(PY) -m tools soak $(SOAK_OPTS)

# The classroom kit (tools/classroom/; README > Teaching with this course). Build outputs only, in build/.
NEEDS_NBGRADER = @$(PY) -c "import nbgrader" 2>/dev/null || { echo "make $@: the classroom kit needs nbgrader, \
  which needs Python 3.11 or newer (this is $$($(PY) -V)). Use e.g. make $@ PYTHON=python3.11 VENV=.venv-3.11"; exit 1; }

student: setup-test ## the classroom kit: every notebook without its worked solutions, in build/student/
	$(NEEDS_NBGRADER)
	$(PY) -m tools classroom student $(or $(NB),notebooks/[0-9][0-9]_*.ipynb)

handouts: setup-test ## the classroom kit: every executed notebook as one self-contained page, in build/handouts/
	$(NEEDS_NBGRADER)
	$(PY) -m tools classroom handouts $(or $(NB),notebooks/[0-9][0-9]_*.ipynb)

lock: $(LEARNER) ## rewrite constraints.txt, one lock for every supported Python (needs the network)
	@$(PY) -m uv --version >/dev/null 2>&1 || $(PY) -m pip install --disable-pip-version-check -q uv
	$(PY) -m tools lock > constraints.txt.new && mv constraints.txt.new constraints.txt

# The non-browser suite on each other supported Python found on this machine, each in its own venv
# (.venv-3.X). PYTHONS names them; TORCH_INDEX_<version> overrides where that Python's torch comes from.
PYTHONS ?= 3.10 3.12 3.13
PYTHONS_OPTS ?=
test-pythons: $(TESTER) ## the non-browser suite on every other supported Python found here, each in .venv-3.X
	@$(PY) -m tools pythons $(PYTHONS) $(PYTHONS_OPTS)

clean: ## remove every virtual environment and build output
	rm -rf $(VENV) .venv-3.* build bench-results test-artifacts .pytest_cache .whl gpu-results
