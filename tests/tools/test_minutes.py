"""The counting rule behind every "Time: about N minutes" of the course (tools/minutes.py).

The rule is the one the course's authors agreed on: prose at 200 words a minute, code at 10 lines a minute,
5 minutes an exercise, optional parts apart. The last test pins a whole notebook's count to the figures the
authors' own counting script gives for it, so that the two cannot part.
"""

from fractions import Fraction

from tools import minutes


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text):
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}


def count(*cells):
    return minutes.count({"cells": list(cells)})


def test_prose_is_read_at_200_words_a_minute_without_tags_or_link_targets():
    assert count(md("word " * 400)).core == 2
    assert count(md('<img src="a.png"> see [the map](https://example.org/a/b/c) now')).core == Fraction(4, 200)


def test_code_is_read_at_10_lines_a_minute_blank_and_comment_lines_not_counted():
    assert count(code("x = 1\n\n# why\n   # indented why\ny = 2\n")).core == Fraction(2, 10)


def test_an_exercise_is_five_minutes_and_its_reveal_cell_is_not_an_exercise():
    c = count(code("answer = ...\nex.check_leaves(answer)"),
              code("# Worked solution\n# %load solutions/01_leaves.py\nex.check_leaves(answer)"))
    assert c.exercises == 1
    assert c.core == 5 + Fraction(2, 10) + Fraction(1, 10)


def test_an_optional_part_runs_to_the_next_heading_of_its_level_or_higher():
    c = count(md("## Going deeper\n\n" + "x " * 96), md("### Still deeper\n\nfour words right here"),
              code("a = 1"), md("## Exercises"), md("# Appendix"), code("b = 2"))
    assert c.optional == Fraction(100 + 6, 200) + Fraction(1, 10) + Fraction(2, 200) + Fraction(1, 10)
    assert c.core == Fraction(2, 200)


def test_minutes_are_rounded_up():
    c = count(md("word " * 201))
    assert (c.core, c.core_minutes) == (Fraction(201, 200), 2)
    assert count(md("word " * 200)).core_minutes == 1


def test_a_whole_notebook_counts_as_the_authors_script_counts_it():
    c = count(
        md("# Title\n\n" + "word " * 150 + '<b>bold</b> a [link](https://example.org/x) "quoted"'),
        code("import torch\n\n# a comment\nx = 1\n  # indented comment\ny = 2\n"),
        md("## Going deeper: hooks\n\n" + "deep " * 100),
        code("z = 3\nw = 4\n"),
        md("### A sub-part\n\nmore words here"),
        md("## Exercises\n\n" + "task " * 20),
        code("answer = ...\nex.check_leaves(answer)"),
        code("# Worked solution\n# %load solutions/01_leaves.py\nex.check_leaves(answer)"),
        {"cell_type": "raw", "metadata": {}, "source": "raw line\n"},
    )
    # what the authors' script printed for this notebook: core 6.59, optional 0.75, 1 exercise
    assert (c.core, c.optional, c.exercises) == (Fraction("6.59"), Fraction("0.75"), 1)


def test_the_command_counts_a_folder_and_says_what_to_give_otherwise(tmp_path, capsys):
    (tmp_path / "01_x.ipynb").write_text('{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "a b"}]}')
    assert minutes.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "01_x.ipynb" in out and "course: core 1 min" in out
    assert minutes.main([str(tmp_path / "missing")]) == 2
    assert "not a folder of notebooks" in capsys.readouterr().err
