"""The course never promises a notebook takes less time than it does.

Each notebook's time is stated three times: in README.md's course map, in notebook 00's map, and in the
notebook's own "Time: about N minutes" line. All three state the same minutes, and never fewer than
tools/minutes.py counts (rounded up). When a notebook grows, this fails until the three follow; when it
shrinks, they may follow (python -m tools minutes gives the new count).
"""

import json
import re
from pathlib import Path

import pytest

from tools import minutes

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAP_ROW = re.compile(r"^\| \d\d \| \[[^\]]+\]\((?:notebooks/)?(?P<file>\d\d_\w+\.ipynb)\) \|.*\| (?P<min>\d+) min \|$",
                     re.M)
TIME_LINE = re.compile(r"\*\*Time:\*\* about (?P<min>\d+) minutes(?:, plus (?P<opt>\d+) optional)?")


def map_minutes(text: str) -> dict[str, int]:
    return {m.group("file"): int(m.group("min")) for m in MAP_ROW.finditer(text)}


def cells(path: Path) -> list:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def intro(path: Path) -> str:
    """The markdown before the first code cell: the title, the promise, prerequisites and the time."""
    text = []
    for cell in cells(path):
        if cell["cell_type"] != "markdown":
            break
        text.append("".join(cell["source"]))
    return "\n".join(text)


def maps() -> dict[str, dict[str, int]]:
    start = next(c for c in cells(REPO / "notebooks" / "00_start_here.ipynb") if c.get("id") == "map")
    return {"README.md": map_minutes((REPO / "README.md").read_text(encoding="utf-8")),
            "notebook 00's map": map_minutes("".join(start["source"]))}


def test_both_maps_list_every_notebook_once():
    names = [p.name for p in NOTEBOOKS]
    for where, found in maps().items():
        assert sorted(found) == names, f"{where}: its map lists {sorted(found)}, the course has {names}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_time_stated_is_the_same_everywhere_and_not_less_than_the_count(path):
    counted = minutes.count_file(path)
    line = TIME_LINE.search(intro(path))
    assert line, f"{path.name}: its opening cell needs a line '**Time:** about N minutes' (N = {counted.core_minutes})"
    stated = {f"{path.name}'s Time line": int(line.group("min"))}
    stated.update({where: found[path.name] for where, found in maps().items() if path.name in found})
    low = {where: n for where, n in stated.items() if n < counted.core_minutes}
    assert not low, (f"{path.name} takes {counted.core_minutes} minutes by tools/minutes.py, but {low} "
                     "promise less: state the count (python -m tools minutes)")
    assert len(set(stated.values())) == 1, f"{path.name}: the time differs from place to place: {stated}"
    if counted.optional_minutes:
        opt = line.group("opt")
        assert opt and int(opt) >= counted.optional_minutes, (
            f"{path.name} has an optional part of {counted.optional_minutes} minutes: its Time line says "
            f"'about {counted.core_minutes} minutes, plus {counted.optional_minutes} optional'")


CORE_LIMIT = {"00_start_here.ipynb": 20}  # minutes; every other notebook: one class period, 50
OPTIONAL_LIMIT = 20


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_core_path_fits_its_limit_and_the_optional_part_fits_in_20_minutes(path):
    counted = minutes.count_file(path)
    limit = CORE_LIMIT.get(path.name, 50)
    assert counted.core_minutes <= limit, (
        f"{path.name}: its core path counts {counted.core_minutes} minutes, more than {limit}: move what the "
        "promise does not need into a 'Going deeper' part after the takeaways, or out")
    assert counted.optional_minutes <= OPTIONAL_LIMIT, (
        f"{path.name}: its optional part counts {counted.optional_minutes} minutes, more than {OPTIONAL_LIMIT}")


MAP_TEXT = re.compile(r"^\| (\d\d) \| \[([^\]]+)\]\([^)]+\) \| (.*?) \| \d+ min \|$", re.M)


def test_both_maps_promise_the_same_for_every_notebook():
    start = next(c for c in cells(REPO / "notebooks" / "00_start_here.ipynb") if c.get("id") == "map")
    readme = MAP_TEXT.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert readme and readme == MAP_TEXT.findall("".join(start["source"]))
