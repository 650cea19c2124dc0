"""Make sure Graphviz's `dot` works: install it where we may (root with apt-get), else say how."""

import os
import shutil
import subprocess
import sys

from autograd_lab.env import graphviz_check, graphviz_install_hint


def _apt_install() -> bool:
    """Install (or repair) the graphviz package with apt-get; True when apt-get succeeded."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--reinstall", "graphviz"]
    if subprocess.run(install, env=env).returncode == 0:
        return True
    # the package lists may be missing on a fresh machine
    return (subprocess.run(["apt-get", "update", "-q"], env=env).returncode == 0
            and subprocess.run(install, env=env).returncode == 0)


def main(argv=None) -> int:
    found, problem = graphviz_check()
    if found:
        return 0
    may_install = (sys.platform.startswith("linux") and shutil.which("apt-get")
                   and hasattr(os, "geteuid") and os.geteuid() == 0)
    if may_install:
        print(f"{problem} Installing Graphviz with apt-get (running as root) ...", flush=True)
        if _apt_install():
            found, problem = graphviz_check()
            if found:
                return 0
    print(f"\nAutograd Lab draws every graph with Graphviz's `dot` program. {problem}\n"
          f"Install it with the command for your system, then run make again:\n\n{graphviz_install_hint()}\n",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
