#!/usr/bin/env bash
# The course checked on a GPU machine that has Python 3.12, a CUDA build of torch and pytest, but no network and no
# Jupyter stack. First, where there is network: `make gpu-wheels` (the wheels it lacks, into .whl/). Then, on the
# machine, from the repository root, with .whl/ copied along:
#
#     bash tools/gpu/check.sh [test|bench|all] [OUT]      (default: all, into $OUT or gpu-results/)
#
# test:  make test-cuda's two suites (the claim tests' CUDA cases; nbval on every notebook, kernels on the GPU).
#        A notebook that fails nbval on the GPU is run again with the GPU hidden, to tell a difference of the GPU
#        from one of this machine's torch, which is not the lock's.
# bench: make bench's CUDA part, made the reference's CUDA section: docs/bench/reference.json and
#        docs/performance.md are rewritten here and copied to OUT, to be committed where they came from.
# OUT gets a log per part and those files. Exit status: 0 when every part asked for passed. The settings PYTHON
# (python3), WHEELS (.whl), JOBS (8) and RUNS (1) change what it runs with.
set -u
cd "$(dirname "$0")/../.."
what=${1:-all}
out=${2:-${OUT:-gpu-results}}
case "$what" in test|bench|all) ;; *) echo "usage: bash tools/gpu/check.sh [test|bench|all] [OUT]" >&2; exit 2;; esac
mkdir -p "$out"
python=${PYTHON:-python3}

site=$(mktemp -d)
missing=$($python -m tools gpu-wheels --missing "${WHEELS:-.whl}") || exit 2
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086  # one path per line, no spaces in wheel names
  $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" $missing || exit 2
fi
export PYTHONPATH="$site:$PWD/helpers:$PWD" PATH="$site/bin:$PATH" PYTHONUNBUFFERED=1
$python -c "import nbval, ipykernel, ipywidgets, torchviz, graphviz, accelerate, transformers, matplotlib, autograd_lab" \
  || { echo "check.sh: a package the tests import is missing (above); add it to tools/gpu/wheels.py" >&2; exit 2; }
$python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '(no GPU visible)')"

status=0
if [ "$what" != bench ]; then
  $python -m tools test-cuda --jobs "${JOBS:-8}" --junit "$out" 2>&1 | tee "$out/test-cuda.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  echo "check.sh: test-cuda done at ${SECONDS} s"
  failed=$($python - "$out/nbval-cuda.xml" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).iter("testcase"))
except (OSError, ET.ParseError):
    sys.exit()
bad = {re.sub(r"^notebooks\.(.+)\.ipynb$", r"notebooks/\1.ipynb", c.get("classname", "")) for c in cases
       if c.find("failure") is not None or c.find("error") is not None}
print(" ".join(sorted(name for name in bad if name.endswith(".ipynb"))))
EOF
)
  if [ -n "$failed" ]; then
    echo "check.sh: again with the GPU hidden: $failed" | tee "$out/nbval-cpu-again.log"
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES= $python -m pytest -p no:cacheprovider -n "${JOBS:-8}" --dist loadscope $failed \
      2>&1 | tee -a "$out/nbval-cpu-again.log"
  fi
fi
if [ "$what" != test ]; then
  $python -m tools bench --parts cuda --runs "${RUNS:-1}" --reference --out "$out/bench" 2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  cp docs/bench/reference.json docs/performance.md "$out/"
  rm -rf "$out/bench"
  echo "check.sh: bench done at ${SECONDS} s"
fi
exit $status
