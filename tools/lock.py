"""Print constraints.txt from the current environment (run by `make lock`)."""

import subprocess
import sys

print("# Exact versions the committed notebook outputs were made and tested with (CPython 3.11, Linux x86-64).")
print("# Regenerate with: make lock. torch is installed from the CPU index first (see Makefile: TORCH_INDEX).")
frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
                        capture_output=True, text=True, check=True).stdout.splitlines()
for line in frozen:
    name = line.split("==")[0].lower()
    if name in {"pip", "autograd-lab", "autograd_lab"}:
        continue
    if name == "setuptools":
        print(line + '; python_version >= "3.12"')
        continue
    print(line.split("+")[0])  # torch==2.13.0+cpu -> torch==2.13.0: the same pin for every build
