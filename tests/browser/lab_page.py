"""The page the browser tests share (see conftest.py, fixture ``lab``)."""

from __future__ import annotations


class SharedPage:
    """One JupyterLab page for the tests, one after the other: loading JupyterLab is the costliest thing
    Chromium does here, so a test opens its notebook in the page the test before left (its documents closed
    first). A test that failed, or a crashed page, leaves a fresh page to the next test."""

    def __init__(self, context):
        self.context = context
        self.page = None
        self.console: list[str] = []
        self.crashed = False

    def take(self):
        if self.page is None or self.page.is_closed() or self.crashed:
            self.drop()
            self.page = self.context.new_page()
            self.crashed = False
            self.page.on("console", lambda m: self.console.append(f"[{m.type}] {m.text}"))
            self.page.on("pageerror", lambda e: self.console.append(f"[pageerror] {e}"))
            self.page.on("crash", lambda _: self._crash())
        self.console = []
        return self.page

    def _crash(self):
        self.crashed = True
        self.console.append("[crash] the page crashed")

    def drop(self):
        if self.page is not None and not self.page.is_closed():
            self.page.close()
        self.page = None
