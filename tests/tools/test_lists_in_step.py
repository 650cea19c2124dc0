"""The lists a contributor reads are the lists the project runs: CONTRIBUTING's targets are `make help`'s (the
Makefile's ``##`` comments), its CI stages are `.ci/run`'s, and every `make X` a page names is a target."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")
CONTRIBUTING = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
DOCUMENTED = re.compile(r"^(?P<target>[a-z][a-z-]*):[^#\n]*## (?P<what>.+)$", re.M)
TARGET = re.compile(r"^(?P<target>[a-z][a-z-]*):", re.M)
INTERNAL = {"help", "setup-test", "python-check"}  # steps of other targets, or the list itself


def help_lines() -> list[str]:
    """What `make help` prints, read from the Makefile the way its awk line reads it."""
    return [f"make {m['target']:<14} {m['what']}" for m in DOCUMENTED.finditer(MAKEFILE)]


def test_contributing_lists_what_make_help_prints():
    block = re.search(r"```text\n(make .*?)```", CONTRIBUTING, re.S)
    assert block, "CONTRIBUTING.md has no ```text block of `make help`'s lines"
    assert block.group(1).splitlines() == help_lines(), "paste `make help`'s output into CONTRIBUTING.md"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_help_prints_the_documented_targets():
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == help_lines()


def test_every_public_target_says_what_it_does():
    phony = set(re.search(r"^\.PHONY:(.*?)(?<!\\)\n", MAKEFILE, re.M | re.S).group(1).replace("\\", " ").split())
    documented = {m["target"] for m in DOCUMENTED.finditer(MAKEFILE)}
    assert phony - INTERNAL <= documented, f"targets without a ## comment: {sorted(phony - INTERNAL - documented)}"


def test_contributing_lists_the_ci_stages_in_order():
    ci = [line.strip()[len("stage "):] for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("stage ")]
    listed = re.findall(r"^\d+\. `(.+?)`:", CONTRIBUTING, re.M)
    assert ci and listed == ci, f"CONTRIBUTING.md lists {listed}; .ci/run runs {ci}"


PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md")),
         *sorted(p for p in (REPO / "tools").rglob("README.md") if "node_modules" not in p.parts)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_make_target_a_page_names_exists(page):
    targets = {m["target"] for m in TARGET.finditer(MAKEFILE)}
    named = set(re.findall(r"`make ([a-z][a-z-]*)", page.read_text(encoding="utf-8")))
    assert named <= targets, f"{page.name} names targets the Makefile lacks: {sorted(named - targets)}"
