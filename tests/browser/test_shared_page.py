"""The browser tests' shared page (lab_page.SharedPage): handed on while tests pass, replaced after a crash
or a failure. Plain objects stand in for Playwright's page and context: this checks the hand-over rule only,
the browser tests themselves use the real ones."""

from lab_page import SharedPage


class _Page:
    def __init__(self):
        self.handlers, self.closed = {}, False

    def on(self, event, handler):
        self.handlers[event] = handler

    def is_closed(self):
        return self.closed

    def close(self):
        self.closed = True


class _Context:
    def __init__(self):
        self.pages = []

    def new_page(self):
        self.pages.append(_Page())
        return self.pages[-1]


def test_the_page_is_handed_on_and_each_test_gets_its_own_console():
    context = _Context()
    shared = SharedPage(context)
    first = shared.take()
    first.handlers["console"](type("Message", (), {"type": "log", "text": "from the first test"})())
    assert shared.console == ["[log] from the first test"]
    assert shared.take() is first and shared.console == [] and len(context.pages) == 1


def test_a_crash_or_a_drop_gives_the_next_test_a_fresh_page():
    context = _Context()
    shared = SharedPage(context)
    first = shared.take()
    first.handlers["crash"](None)
    assert shared.console == ["[crash] the page crashed"]
    second = shared.take()
    assert second is not first and first.closed and not second.closed
    shared.drop()  # what the lab fixture does after a failed test
    third = shared.take()
    assert third is not second and second.closed and len(context.pages) == 3
