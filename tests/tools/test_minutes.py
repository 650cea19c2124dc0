"""The counting rule behind every "Time: about N minutes" of the course (tools/minutes.py).

The rule counts what a learner does: prose at 150 words a minute, code at 10 lines a minute, printed output at
20 lines a minute (a picture 1 minute), 2 minutes a "Predict", 3 a widget, 8 an exercise (12 when its worked
solution has more than 8 lines), optional parts apart. The last test pins every notebook's count to the figures
the course owners' counting script (shared/tools/minutes.py) gives, so that the two cannot part.
"""

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from tools import minutes

REPO = Path(__file__).resolve().parents[2]
OWNERS_SCRIPT = REPO.parent / "shared" / "tools" / "minutes.py"


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text, outputs=()):
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": list(outputs), "execution_count": None}


def count(*cells, folder=None):
    return minutes.count({"cells": list(cells)}, folder)


def test_prose_is_read_at_150_words_a_minute_without_tags_or_link_targets():
    assert count(md("word " * 300)).core == 2
    assert count(md('<img src="a.png"> see [the map](https://example.org/a/b/c) now')).core == Fraction(4, 150)


def test_each_predict_in_the_prose_is_two_minutes():
    assert count(md("Predict, then run. Predict again.")).core == Fraction(5, 150) + 4


def test_code_is_read_at_10_lines_a_minute_blank_and_comment_lines_not_counted():
    assert count(code("x = 1\n\n# why\n   # indented why\ny = 2\n")).core == Fraction(2, 10)


def test_outputs_count_printed_lines_pictures_and_widgets():
    printed = {"output_type": "stream", "name": "stdout", "text": "a\nb\n\nc\n"}
    picture = {"output_type": "display_data", "data": {"image/svg+xml": "<svg/>", "text/plain": "x"}}
    widget = {"output_type": "display_data", "data": {minutes.WIDGET: {}, "text/plain": "VBox()"}}
    assert count(code("x", [printed, picture, widget])).core == Fraction(1, 10) + Fraction(3, 20) + 1 + 3


def test_an_exercise_is_8_minutes_12_with_a_long_solution_and_its_reveal_cell_is_not_one(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "short.py").write_text("# why\nanswer = 1\nex.check_a(answer)\n")
    (tmp_path / "solutions" / "long.py").write_text("".join(f"x{i} = {i}\n" for i in range(9)))
    reveal = '# Worked solution: delete the "# " before %load and run it.\n# %load solutions/{}.py'
    c = count(code("answer = ...\nex.check_a(answer)"), code(reveal.format("short")),
              code("answer = ...\nex.check_b(answer)"), code(reveal.format("long")), folder=tmp_path)
    assert c.exercises == 2
    assert c.core == 8 + 12 + Fraction(4, 10)


def test_an_optional_part_runs_to_the_next_heading_of_its_level_or_higher():
    c = count(md("## Going deeper\n\n" + "x " * 96), md("### Still deeper\n\nfour words right here"),
              code("a = 1"), md("## Exercises"), md("# Appendix"), code("b = 2"))
    assert c.optional == Fraction(100 + 6, 150) + Fraction(1, 10) + Fraction(2, 150) + Fraction(1, 10)
    assert c.core == Fraction(2, 150)


def test_minutes_are_rounded_up():
    c = count(md("word " * 151))
    assert (c.core, c.core_minutes) == (Fraction(151, 150), 2)
    assert count(md("word " * 150)).core_minutes == 1


@pytest.mark.skipif(not OWNERS_SCRIPT.is_file(), reason="the owners' counting script lies beside the checkout")
def test_every_notebook_counts_as_the_owners_script_counts_it_but_for_long_worked_solutions():
    """The owners' script finds a reveal cell's file with the first "%load" in the cell, which is the word in its
    instructions ("delete the # before %load and run"), so it counts every exercise 8 minutes; the rule says 12
    when the worked solution has more than 8 lines, and this count follows the rule. Nothing else differs."""
    run = subprocess.run([sys.executable, str(OWNERS_SCRIPT), str(REPO / "notebooks")], capture_output=True,
                         text=True, check=True)
    theirs = {line.split()[0]: (float(line.split()[2]), float(line.split()[5]))
              for line in run.stdout.splitlines() if line.endswith("min") and ".ipynb" in line}
    extra = minutes.MINUTES_A_LONG_EXERCISE - minutes.MINUTES_AN_EXERCISE
    for path in sorted((REPO / "notebooks").glob("[0-9]*.ipynb")):
        nb = json.loads(path.read_text())
        ours = minutes.count(nb, path.parent)
        longs = {"core": 0, "optional": 0}
        for part, lines in _solutions_by_part(nb, path.parent):
            longs[part] += extra * (lines > minutes.LONG_SOLUTION_LINES)
        core, optional = theirs[path.name]
        assert abs(float(ours.core) - longs["core"] - core) <= 0.5, path.name
        assert abs(float(ours.optional) - longs["optional"] - optional) <= 0.5, path.name


def _solutions_by_part(nb, folder):
    """(core or optional, lines of the worked solution) for each reveal cell of a notebook."""
    part, level = "core", None
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        heading = minutes.HEADING.match(text) if cell["cell_type"] == "markdown" else None
        if heading:
            if level is not None and len(heading.group(1)) <= level:
                part, level = "core", None
            if minutes.OPTIONAL_HEADING.search(heading.group(2)):
                part, level = "optional", len(heading.group(1))
        if cell["cell_type"] == "code" and minutes.LOAD.search(text):
            yield part, minutes.solution_lines(folder, text)


def test_the_command_counts_a_folder_and_says_what_to_give_otherwise(tmp_path, capsys):
    (tmp_path / "01_x.ipynb").write_text('{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "a b"}]}')
    assert minutes.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "01_x.ipynb" in out and "course: core 1 min" in out
    assert minutes.main([str(tmp_path / "missing")]) == 2
    assert "not a folder of notebooks" in capsys.readouterr().err
