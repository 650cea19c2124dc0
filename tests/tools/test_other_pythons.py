"""Which other Pythons `make test-pythons` tests (tools/other_pythons.py), without installing any."""

from tools.other_pythons import choose


def machine(*present):
    return lambda version: f"/opt/python{version}" if version in present else None


def test_every_version_found_is_tested_oldest_first_and_the_absent_ones_are_named():
    found, results = choose(["3.13", "3.10", "3.12"], machine("3.10", "3.13"))
    assert list(found) == ["3.10", "3.13"]
    assert results["3.12"].startswith("ABSENT") and "3.12" in results["3.12"]


def test_ends_keeps_the_oldest_and_the_newest_found():
    found, results = choose(["3.10", "3.12", "3.13"], machine("3.10", "3.12", "3.13"), ends=True)
    assert list(found) == ["3.10", "3.13"]
    assert "left out" in results["3.12"]


def test_ends_moves_to_the_next_newest_when_the_newest_is_absent():
    found, results = choose(["3.10", "3.12", "3.13"], machine("3.10", "3.12"), ends=True)
    assert list(found) == ["3.10", "3.12"]
    assert results["3.13"].startswith("ABSENT")


def test_versions_sort_as_numbers_not_as_text():
    found, _ = choose(["3.9", "3.10", "3.13"], machine("3.9", "3.10", "3.13"), ends=True)
    assert list(found) == ["3.9", "3.13"]
