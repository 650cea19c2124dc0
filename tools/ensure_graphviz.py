"""Is there a layout engine for the course's graphs? (`python -m tools graphviz`)

The course installs its own engine, graphviz-pure, with pip, so a learner's set-up needs no system Graphviz and
this tool never stops it: `make setup` runs it with --warn-only, which only says what to do where no engine
works (a platform without a graphviz-pure wheel and no system `dot`: the course still opens, its graphs shown
as text). `--system` asks for a system Graphviz `dot` instead, what AUTOGRAD_LAB_DOT=dot and the engines'
cross-check (tests/instruments/test_engines.py) use: it installs one where it may (root with apt-get, as CI
runs), else says how, and fails without one.
"""

import argparse
import os
import shutil
import subprocess
import sys

from autograd_lab.engine import Engine, engine_repair, graphviz_check, graphviz_install_hint


def _apt_install() -> bool:
    """Install (or repair) the graphviz package with apt-get; True when apt-get succeeded."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--reinstall", "graphviz"]
    if subprocess.run(install, env=env).returncode == 0:
        return True
    # the package lists may be missing on a fresh machine
    return (subprocess.run(["apt-get", "update", "-q"], env=env).returncode == 0
            and subprocess.run(install, env=env).returncode == 0)


def _system_dot() -> tuple[str | None, str | None]:
    program = shutil.which("dot")
    if program is None:
        return None, "No system Graphviz `dot` program is on PATH."
    return graphviz_check(Engine(program, "dot", pure=False))


def ensure_system_dot() -> int:
    found, problem = _system_dot()
    if found:
        return 0
    may_install = (sys.platform.startswith("linux") and shutil.which("apt-get")
                   and hasattr(os, "geteuid") and os.geteuid() == 0)
    if may_install:
        print(f"{problem} Installing Graphviz with apt-get (running as root) ...", flush=True)
        if _apt_install() and _system_dot()[0]:
            return 0
        problem = _system_dot()[1]
    print(f"\n{problem} The course draws without one (graphviz-pure); a system `dot` is for AUTOGRAD_LAB_DOT=dot "
          f"and for the cross-check of both engines. Install it with the command for your system:\n\n"
          f"{graphviz_install_hint()}\n", file=sys.stderr)
    return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools graphviz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", action="store_true", help="make sure a system Graphviz `dot` works")
    parser.add_argument("--warn-only", action="store_true", help="say what to do where no engine works; exit 0")
    args = parser.parse_args(argv)
    if args.system:
        return ensure_system_dot()
    found, problem = graphviz_check()
    if found:
        return 0
    print(f"\nNOTE: the course's graphs will show as text, not pictures, until a layout engine works here.\n"
          f"{problem}\n{engine_repair()}\n", file=sys.stderr)
    return 0 if args.warn_only else 1


if __name__ == "__main__":
    sys.exit(main())
