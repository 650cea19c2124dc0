"""``make gpu-wheels`` (``python -m tools gpu-wheels``): the wheels that a GPU machine without network lacks for
``make test-cuda`` and ``make bench``'s CUDA part, downloaded here into ``.whl/`` (git ignores it).

The machine is taken to have Python 3.12 on Linux x86-64 with a CUDA build of torch and the usual companions of
one (``PROVIDED``: numpy, matplotlib, transformers, accelerate, pytest and its plugins, ...). What it lacks is the
Jupyter stack that nbval runs and the course's own drawing packages: ``ROOTS`` and everything they need, found by
reading each downloaded wheel's requirements (for that Python and platform), at the lock's versions
(constraints.txt). Wheels of earlier downloads that are no longer needed are removed: two versions of one package
would stop the install there.

On the machine, ``python -m tools gpu-wheels --missing .whl`` prints the wheels whose package is not installed
there (tools/gpu/check.sh installs those only, so that nothing the machine has is replaced).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEST = ROOT / ".whl"
CONSTRAINTS = ROOT / "constraints.txt"
PYTHON = "3.12.3"  # the GPU machine's Python (markers are evaluated for it)
ROOTS = ("nbval", "nbclient", "nbformat", "jupyter-client", "ipykernel", "ipywidgets", "torchviz", "graphviz",
         "graphviz-pure")
PROVIDED = frozenset({
    "torch", "triton", "numpy", "matplotlib", "pillow", "transformers", "accelerate", "huggingface-hub",
    "tokenizers", "safetensors", "pytest", "pytest-xdist", "pytest-timeout", "psutil", "packaging", "pyyaml", "tqdm",
    "setuptools", "jinja2", "markupsafe", "sympy", "networkx", "filelock", "fsspec",
})
# pip takes each manylinux tag it may choose from by name: glibc 2.17 (manylinux2014) to 2.39 (Ubuntu 24.04)
PLATFORMS = ("manylinux1_x86_64", "manylinux2014_x86_64", *(f"manylinux_2_{n}_x86_64" for n in range(17, 40)))
BUDGET_MIB = 56.0  # the wheels travel with the working tree, and a copy to a lent machine is limited in size


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def environment(python: str = PYTHON) -> dict:
    """The environment markers of the GPU machine's Python."""
    return {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python,
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "implementation_version": python, "sys_platform": "linux", "platform_system": "Linux",
            "platform_machine": "x86_64", "os_name": "posix", "platform_release": "", "platform_version": "",
            "extra": ""}


def lock_versions(text: str, env: dict) -> dict:
    """{normalized name: version} of the lock's lines whose marker holds for ``env``."""
    from packaging.markers import Marker

    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        pin, _, marker = line.partition(";")
        name, _, version = pin.partition("==")
        if not marker.strip() or Marker(marker.strip()).evaluate(env):
            found[normalized(name)] = version.strip()
    return found


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return normalized(name), version


def requirements(wheel: Path, env: dict) -> list[str]:
    """The normalized names a wheel requires on ``env``, extras left out."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(metadata).decode("utf-8"))
    names = []
    for line in message.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(env):
            names.append(normalized(requirement.name))
    return names


def download(pins: list[str], dest: Path, python: str) -> None:
    """pip downloads the pinned wheels, built for ``python`` on Linux x86-64, without their requirements."""
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(dest), "-q"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + pins, check=True)


def collect(dest: Path = DEST, python: str = PYTHON, constraints: Path = CONSTRAINTS) -> list[Path]:
    """Download ``ROOTS`` and what they need (not ``PROVIDED``) into ``dest``; the wheels, one per package."""
    env = environment(python)
    versions = lock_versions(constraints.read_text(encoding="utf-8"), env)
    dest.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, str] = {}
    level = [normalized(name) for name in ROOTS]
    while level:
        new = sorted({name for name in level if name not in wanted and name not in PROVIDED})
        unpinned = [name for name in new if name not in versions]
        if unpinned:
            raise SystemExit(f"gpu-wheels: {', '.join(unpinned)} not in {constraints.name} for Python {python}: "
                             "run make lock")
        wanted.update({name: versions[name] for name in new})
        download([f"{name}=={versions[name]}" for name in new], dest, python)
        by_name = {wheel_name(w): w for w in dest.glob("*.whl")}
        level = [req for name in new for req in requirements(by_name[name, versions[name]], env)]
    kept = []
    for wheel in sorted(dest.glob("*.whl")):
        name, version = wheel_name(wheel)
        if wanted.get(name) == version:
            kept.append(wheel)
        else:
            wheel.unlink()  # an earlier download's: not needed now, or another version
    return kept


def missing(folder: Path) -> list[Path]:
    """The wheels in ``folder`` whose package is not installed in this Python."""
    from importlib.metadata import distributions

    installed = {normalized(d.metadata["Name"]) for d in distributions() if d.metadata["Name"]}
    return [w for w in sorted(folder.glob("*.whl")) if wheel_name(w)[0] not in installed]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=DEST, help="where the wheels go (default: .whl/)")
    parser.add_argument("--python", default=PYTHON, help="the GPU machine's Python version")
    parser.add_argument("--missing", type=Path, metavar="FOLDER",
                        help="download nothing: print the wheels in FOLDER whose package this Python lacks")
    args = parser.parse_args(argv)
    if args.missing is not None:
        if not args.missing.is_dir():
            print(f"gpu-wheels: {args.missing} is not a folder of wheels: run make gpu-wheels first", file=sys.stderr)
            return 2
        print("\n".join(str(w) for w in missing(args.missing)))
        return 0
    wheels = collect(args.dest, args.python)
    mib = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"gpu-wheels: {len(wheels)} wheels, {mib:.1f} MiB, in {args.dest}")
    if mib > BUDGET_MIB:
        print(f"gpu-wheels: more than {BUDGET_MIB:g} MiB, too much to travel with the working tree: is a package "
              "the machine has missing from PROVIDED?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
