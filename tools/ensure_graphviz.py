"""Make sure Graphviz's `dot` is on PATH: install it where we may (root with apt-get), else say how."""

import os
import shutil
import subprocess
import sys

if shutil.which("dot"):
    sys.exit(0)

if sys.platform.startswith("linux") and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
    print("Graphviz's `dot` is missing; installing it with apt-get (running as root) ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    ok = subprocess.run(["apt-get", "install", "-y", "-q", "graphviz"], env=env).returncode == 0
    if not ok:  # the package lists may be missing on a fresh machine
        ok = (
            subprocess.run(["apt-get", "update", "-q"], env=env).returncode == 0
            and subprocess.run(["apt-get", "install", "-y", "-q", "graphviz"], env=env).returncode == 0
        )
    if ok and shutil.which("dot"):
        sys.exit(0)

print(
    """
Autograd Lab draws every graph with Graphviz's `dot` program, and it is not on PATH.
Install it with the command for your system, then run make again:

  Debian/Ubuntu   sudo apt-get install graphviz
  Fedora          sudo dnf install graphviz
  macOS           brew install graphviz
  Windows         winget install graphviz     (or: choco install graphviz; then reopen the terminal)
  conda           conda install -c conda-forge graphviz
""",
    file=sys.stderr,
)
sys.exit(1)
