# Autograd Lab -- two commands: `make lab` (open the course) and `make test` (check it).
# Each sets itself up on a fresh machine: a local virtual environment, the pinned
# packages (a CPU build of PyTorch), and Graphviz's `dot`.

PYTHON      ?= python3
VENV        ?= .venv
# Where PyTorch comes from. The CPU index (whose builds, tagged +cpu, pip prefers over PyPI's same
# version) keeps the install small; for a GPU build use
# e.g. `make lab TORCH_INDEX=https://download.pytorch.org/whl/cu128` (see README).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
CONSTRAINTS ?= constraints.txt
EXTRAS      ?= test,classroom
PORT        ?= 8888
JOBS        ?= 2

BIN   := $(VENV)/bin
PY    := $(BIN)/python
STAMP := $(VENV)/.autograd-lab-installed

.PHONY: lab test test-fast test-browser notebooks setup graphviz bench lock clean help student handouts

help:
	@echo "make lab        set up (venv, packages, Graphviz) and open JupyterLab on the course map"
	@echo "make test       set up, then every test: unit tests, nbval on every notebook, browser tests"
	@echo "make notebooks  re-execute every notebook in a fresh kernel and save it"
	@echo "make bench      measure notebook cost, widget latency and the course's figures at scale"

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || \
	  $(PY) -m pip install --disable-pip-version-check -c $(CONSTRAINTS) torch --extra-index-url $(TORCH_INDEX) --retries 1
	$(PY) -m pip install --disable-pip-version-check -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	@touch $@

setup: $(STAMP) graphviz

graphviz:
	@$(PYTHON) tools/ensure_graphviz.py

# JupyterLab refuses to run as root unless told; containers and CI often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)

lab: setup
	$(BIN)/jupyter lab --port $(PORT) $(ROOT_FLAG) $(LAB_ARGS) notebooks/00_start_here.ipynb

test: setup
	$(PY) -m pytest -m "not browser" -n $(JOBS) --dist loadscope tests notebooks
	$(PY) -m pytest -m browser tests

test-fast: setup
	$(PY) -m pytest -m "not browser" -n $(JOBS) tests

test-browser: setup
	$(PY) -m pytest -m browser tests

notebooks: setup
	$(PY) tools/execute_notebooks.py $(or $(NB),notebooks/*.ipynb)

bench: setup
	$(PY) tools/bench.py

# The classroom kit (tools/classroom.py; README > Teaching with this course). Build outputs only, in build/.
student: setup
	$(PY) tools/classroom.py student $(or $(NB),notebooks/[0-9][0-9]_*.ipynb)

handouts: setup
	$(PY) tools/classroom.py handouts $(or $(NB),notebooks/[0-9][0-9]_*.ipynb)

lock: $(STAMP)
	$(PY) tools/lock.py > $(CONSTRAINTS).new && mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf $(VENV) build bench-results test-artifacts .pytest_cache
