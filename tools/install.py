"""Install the course's packages into this virtual environment: uv where it can, pip where it cannot.

The Makefile installs torch first, with pip: TORCH_INDEX and this machine's pip settings choose the build (uv,
pinned here as ``UV``, comes in the same pip run; where it is missing, it is installed here).
Everything else (JupyterLab, the test and classroom tools: well over a hundred packages) comes next, and
there pip spends most of a set-up resolving and downloading one package after another; uv installs the same
locked set, downloading in parallel. torch, already installed, satisfies the lock and is left as it is.

uv reads neither pip's configuration files nor its PIP_* variables, so the settings that say where packages
come from and which versions are allowed are handed on (index-url, extra-index-url, find-links, no-index,
constraint, trusted-host, cert, proxy). A pip setting not known here, a uv that cannot be installed, or a uv
that fails: pip installs the same set, and a line says why.

    python -m tools install PIP_INSTALL_ARGS...      e.g.  -c constraints.txt -e ".[test,classroom]"

Only ``-c FILE``, ``-e TARGET`` and plain requirements are passed (both installers read them alike). Neither
installer compiles byte-code: this does, on every core, for everything but what ``not_compiled`` names --
torch's (installed before, left as it is) while the rest installs, the rest's last.
AUTOGRAD_LAB_INSTALLER=pip makes pip do the installing.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys

UV = "uv==0.13.9"  # the installer itself, pinned: a new uv never changes a set-up unannounced

# pip settings that change nothing about what is installed from where.
HARMLESS = {"default-timeout", "timeout", "retries", "disable-pip-version-check", "no-cache-dir",
            "cache-dir", "progress-bar", "quiet", "verbose", "root-user-action", "no-warn-script-location",
            "require-virtualenv", "no-input", "no-color", "log", "break-system-packages", "use-feature",
            "no-python-version-warning", "exists-action", "user-agent", "config-file"}
LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint",
         "trusted-host": "--allow-insecure-host"}


class Unsupported(Exception):
    """A pip setting uv cannot be told: pip installs instead."""


def pip_settings(python: str) -> dict[str, str]:
    """pip's effective settings for `pip install`, as `pip config list` gives them (files, then PIP_* variables:
    the install section overrides global, a variable overrides both)."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    rank = {"global": 0, "install": 1, ":env:": 2}
    found: dict[str, tuple[int, str]] = {}
    for line in listed.splitlines():
        match = re.match(r"^(global|install|:env:)\.([a-z0-9-]+)=(.+)$", line.strip())
        if match:
            section, key, shown = match.groups()
            try:  # pip shows each value as Python's repr: a list in a file, one per line, shows as '...\n...'
                value = str(ast.literal_eval(shown))
            except (ValueError, SyntaxError):
                raise Unsupported(f"pip's setting {key!r} ({shown})") from None
            if key not in found or rank[section] >= found[key][0]:
                found[key] = (rank[section], value)
    return {key: value for key, (_, value) in found.items()}


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's command-line options and environment for pip's settings; Unsupported for one it cannot take."""
    options, env = [], {}
    for key, value in settings.items():
        if key in LISTS:
            for item in value.split():
                options += [LISTS[key], item]
        elif key == "index-url":
            options += ["--index-url", value]
        elif key == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                options.append("--no-index")
        elif key == "proxy":
            env.update(HTTP_PROXY=value, HTTPS_PROXY=value)
        elif key == "cert":
            env.setdefault("SSL_CERT_FILE", value)
        elif key not in HARMLESS:
            raise Unsupported(f"pip's setting {key!r}")
    return options, env


def passed_on(args: list[str]) -> list[str]:
    """The pip install arguments both installers take alike; Unsupported for any other."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and arg not in ("-c", "-e") and (i == 0 or args[i - 1] not in ("-c", "-e")):
            raise Unsupported(f"the argument {arg!r}")
    return args


def with_uv(python: str, args: list[str]) -> str | None:
    """Install with uv; None when done, else the reason pip should do it."""
    try:
        options, env = uv_options(pip_settings(python))
        passed_on(args)
    except Unsupported as reason:
        return f"{reason} has no uv equivalent here"
    if subprocess.run([python, "-c", "import uv"], capture_output=True).returncode != 0:
        got = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", UV])
        if got.returncode != 0:
            return f"{UV} could not be installed"
    command = [python, "-m", "uv", "pip", "install", "--python", python, "--index-strategy", "unsafe-best-match",
               *options, *args]
    done = subprocess.run(command, env={**os.environ, **env})
    return None if done.returncode == 0 else f"uv failed (exit status {done.returncode})"


# Packages only the test tools import, each in the few processes that run its tests, and a small part of it:
# transformers (a handful of real architectures, built from configs) holds thousands of modules, more than torch.
TEST_TOOLS_ONLY = ("transformers",)


def not_compiled(site: str) -> str:
    """compileall's -x pattern for what is left to the imports in ``site``: the packages' own test suites (sympy's,
    networkx's, numpy's: over a thousand large files), which nothing the course runs imports, and TEST_TOOLS_ONLY.
    Imported anyway, such a module is compiled then, as any module without byte-code. Anchored at ``site``: a venv
    inside a folder named tests is compiled whole."""
    packages = "|".join(map(re.escape, TEST_TOOLS_ONLY))
    return re.escape(site.rstrip("/\\")) + rf"[/\\](?:(?:{packages})[/\\]|(?:[^/\\]+[/\\])*tests?[/\\])"


WHERE = ("import importlib.util, sysconfig; spec = importlib.util.find_spec('torch'); "
         "print(sysconfig.get_paths()['purelib']); "
         "print(spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else '')")


def where(python: str) -> tuple[str, str]:
    """Where ``python`` installs packages, and torch's folder there ('' where torch is not installed)."""
    asked = subprocess.run([python, "-c", WHERE], capture_output=True, text=True)
    lines = (asked.stdout or "").splitlines() if asked.returncode == 0 else []
    return (lines + ["", ""])[0].strip(), (lines + ["", ""])[1].strip()


def source_size(path: str, left: re.Pattern) -> int:
    """The bytes of Python source in a file or folder that compileall compiles (``left``: its -x pattern)."""
    files = [path] if not os.path.isdir(path) else [os.path.join(folder, name) for folder, _, names in os.walk(path)
                                                     for name in names]
    return sum(os.path.getsize(f) for f in files if f.endswith(".py") and not left.search(f))


def shares(paths: list[str], n: int, left: re.Pattern) -> list[list[str]]:
    """``paths`` dealt into at most ``n`` shares of about as much source to compile each, the largest first."""
    totals, dealt = [0] * n, [[] for _ in range(n)]
    for size, path in sorted(((source_size(p, left), p) for p in paths), reverse=True):
        if size:  # to the share with the least source so far
            least = totals.index(min(totals))
            totals[least] += size
            dealt[least].append(path)
    return [share for share in dealt if share]


def start_compiling(python: str, site: str, paths: list[str]) -> list[subprocess.Popen]:
    """Byte-code for ``paths`` (in ``site``), but what ``not_compiled`` leaves to the imports: one compileall a
    share, one share a core, each compiling file after file (compileall -j hands the files to its workers one small
    batch at a time, and the handing costs more than the compiling of most). -qq: a file that is not Python of this
    version, a template, is skipped quietly, as pip skips it. Compiled here, once, not left to the imports: where
    Python never writes byte-code at import (PYTHONDONTWRITEBYTECODE, set on many machines), a module left
    uncompiled is compiled again in every process that imports it, torch's modules in every process that imports
    torch."""
    if not paths:
        return []
    left = not_compiled(site)
    return [subprocess.Popen([python, "-m", "compileall", "-qq", "-x", left, *share], stdout=subprocess.DEVNULL)
            for share in shares(paths, os.cpu_count() or 1, re.compile(left))]


def wait_for(compilers: list[subprocess.Popen]) -> None:
    for compiler in compilers:
        compiler.wait()


def installed(site: str, but: str = "") -> list[str]:
    """The packages and modules in ``site`` (every entry: compileall skips what holds no Python), but ``but``."""
    if not site or not os.path.isdir(site):
        return []
    skip = os.path.realpath(but) if but else None  # however each path was spelled
    return [entry for entry in (os.path.join(site, name) for name in sorted(os.listdir(site)))
            if os.path.realpath(entry) != skip]


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    python = sys.executable
    site, torch = where(python)
    # torch, installed first (Makefile) and left as it is by this install, is compiled meanwhile: an install
    # mostly waits on the network
    compiling = start_compiling(python, site, [torch] if torch else [])
    try:
        code = install(python, args)
        if code == 0:  # the rest, beside what may be left of torch's
            compiling += start_compiling(python, site, installed(site, but=torch))
    finally:  # never left running: waited for, whatever the install did
        wait_for(compiling)
    return code


def install(python: str, args: list[str]) -> int:
    """The install itself, with uv or else pip; its exit status."""
    if os.environ.get("AUTOGRAD_LAB_INSTALLER", "uv") != "pip":
        reason = with_uv(python, args)
        if reason is None:
            return 0
        print(f"install: {reason}; pip installs the packages instead.", flush=True)
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile", *args]
    print(shlex.join(command), flush=True)
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
