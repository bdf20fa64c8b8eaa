"""Drive a notebook in JupyterLab 4 or Notebook 7 as a user does, on one kernel per notebook.

Opening a notebook waits on explicit states, never on a time: the notebook's
session and kernel are made through the server's REST API before the page
loads; the page is used only once the server counts its websocket on that
kernel and reports the kernel idle, and the notebook's toolbar names the kernel
and shows it idle. Typing earlier was the double-kernel race: a Shift+Enter
while the page had not yet joined the session made JupyterLab ask for a kernel,
and the answer started a second one and shut the first down with requests in
flight to it ("Canceled future for create_subshell_request message before
replies were done"). The kernel's id is checked again after the first cell.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Literal

from playwright.sync_api import Locator, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from ._hosts import START_TIMEOUT_S, JupyterServer
from ._pages import PageLog, wait_attached

#: How long one notebook cell may run (the weight-space widgets compute on the shipped model).
CELL_TIMEOUT_S = 180

#: The notebook's toolbar: the kernel's name ("No Kernel" until the page joins a session) and its state.
KERNEL_NAME = ".jp-NotebookPanel-toolbar .jp-KernelName, .jp-Toolbar .jp-KernelName"
KERNEL_STATE = ".jp-Notebook-ExecutionIndicator"


class NotebookPage:
    """Drive a notebook in JupyterLab or Notebook 7 as a user does: type in the last cell, Shift+Enter.

    Both front ends share the notebook widgets (``.jp-Notebook``, ``.jp-Cell``,
    ``.jp-InputPrompt``, ``.jp-OutputArea-output``) and the toolbar's kernel
    name and execution indicator.
    """

    def __init__(self, page: Page, log: PageLog | None = None) -> None:
        self.page = page
        self.log = PageLog() if log is None else log
        #: The id of the notebook's kernel, once :meth:`open` has joined it.
        self.kernel_id = ""

    @property
    def cells(self) -> Locator:
        return self.page.locator(".jp-Notebook .jp-Cell")

    def open(
        self,
        jupyter: JupyterServer,
        path: str,
        front: Literal["lab", "notebook7"] = "lab",
        timeout_s: float = START_TIMEOUT_S,
    ) -> str:
        """Open the notebook ``path`` on its one kernel, wait until the page has joined that kernel and it runs a
        cell, and return the kernel's id."""
        self.kernel_id = jupyter.start_kernel(path, timeout_s=timeout_s)
        self.page.goto(
            jupyter.lab_url(path) if front == "lab" else jupyter.notebook7_url(path), timeout=timeout_s * 1000
        )
        self.cells.first.wait_for(timeout=timeout_s * 1000)
        try:
            self._wait_joined(jupyter, path, timeout_s)
            self.run("print('cw-kernel-ready')", timeout_s=timeout_s)
        except Exception as exc:
            dialog = self.page.locator(".jp-Dialog")
            text = dialog.first.inner_text() if dialog.count() else "(no dialog)"
            raise AssertionError(f"the notebook did not run a first cell; dialog: {text!r}") from exc
        self._assert_same_kernel(jupyter, path)
        return self.kernel_id

    def _wait_joined(self, jupyter: JupyterServer, path: str, timeout_s: float) -> None:
        """Until the server reports the notebook's kernel idle with the page's websocket on it, and the page's
        toolbar names a kernel and shows it idle (the indicator says "idle" before a kernel is joined, too)."""
        name, state = self.page.locator(KERNEL_NAME).first, self.page.locator(KERNEL_STATE).first
        deadline = time.monotonic() + timeout_s
        seen: dict[str, Any] = {}
        while True:
            kernel = jupyter.session_kernel(path) or {}
            seen = {
                "kernel": kernel.get("id"),
                "server state": kernel.get("execution_state"),
                "connections": kernel.get("connections"),
                "toolbar name": (name.text_content() or "").strip() if name.count() else None,
                "toolbar state": state.get_attribute("data-status") if state.count() else None,
            }
            if kernel.get("id") != self.kernel_id:
                raise AssertionError(f"the notebook's kernel changed before the page joined it: {seen}")
            if (
                seen["server state"] == "idle"
                and (seen["connections"] or 0) >= 1
                and seen["toolbar name"] not in (None, "", "No Kernel")
                and seen["toolbar state"] == "idle"
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page did not join the notebook's kernel within {timeout_s:.0f}s: {seen}")
            time.sleep(0.2)

    def _assert_same_kernel(self, jupyter: JupyterServer, path: str) -> None:
        kernel = jupyter.session_kernel(path) or {}
        assert kernel.get("id") == self.kernel_id, f"the notebook's kernel was replaced: {self.kernel_id} → {kernel}"

    def no_dialog(self) -> None:
        """Fail with its text on any dialog over the notebook, after answering a kernel choice with the notebook's
        own running kernel (never a new one: that is the double kernel)."""
        dialog = self.page.locator(".jp-Dialog")
        if not dialog.count():
            return
        text = dialog.first.inner_text()
        if "Select Kernel" in text and self.kernel_id:
            select = dialog.first.locator("select").first
            ours = [o for o in select.locator("option").all_text_contents() if f"({self.kernel_id[:8]})" in o]
            if ours:
                select.select_option(label=ours[0])
                dialog.first.locator(".jp-mod-accept").first.click()
                dialog.first.wait_for(state="detached")
                return
        raise AssertionError(f"a dialog covers the notebook: {text!r}")

    def _prompt(self, index: int) -> str:
        return str(self.cells.nth(index).locator(".jp-InputPrompt").first.text_content() or "")

    def _type(self, index: int, code: str, deadline: float) -> None:
        """Put ``code`` into cell ``index`` and press Shift+Enter, once the editor takes the click."""
        editor = self.cells.nth(index).locator(".cm-content").first
        while True:
            self.no_dialog()
            try:
                editor.click(timeout=5_000)
                break
            except PlaywrightTimeoutError:
                if time.monotonic() > deadline:
                    raise
        self.page.keyboard.press("Control+a")
        self.page.keyboard.press("Delete")
        self.page.keyboard.insert_text(code)
        self.page.keyboard.press("Shift+Enter")

    def run(self, code: str, timeout_s: float = CELL_TIMEOUT_S) -> str:
        """Type ``code`` into the last (empty) cell, run it, and return its output text.

        Shift+Enter on the last cell runs it and adds a cell under it: a run the page took shows as that new
        cell, or as the prompt's ``*`` or number, and is never typed twice. Raises AssertionError with the
        traceback when the cell raises.
        """
        index = self.cells.count() - 1
        deadline = time.monotonic() + timeout_s
        self._type(index, code, deadline)
        while True:
            prompt = self._prompt(index)
            if re.search(r"\[\d+\]", prompt):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell {index} did not finish within {timeout_s:.0f}s (prompt {prompt!r}):\n{code}")
            if "*" not in prompt and self._not_taken(index):
                self._type(index, code, deadline)
            time.sleep(0.2)
        return self.output(index)

    def _not_taken(self, index: int) -> bool:
        """Whether the page has drawn two frames since the key press and still shows no run of cell ``index``: no
        ``*`` or number in its prompt and no cell added under it (the key press reached no editor)."""
        self.page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
        prompt = self._prompt(index)
        return "*" not in prompt and not re.search(r"\[\d+\]", prompt) and self.cells.count() == index + 1

    def output(self, index: int) -> str:
        outputs = self.cells.nth(index).locator(".jp-OutputArea-output")
        texts = [outputs.nth(i).inner_text() for i in range(outputs.count())]
        errors = self.cells.nth(index).locator(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
        )
        if errors.count() and any("Traceback" in t or "Error" in t for t in errors.all_inner_texts()):
            raise AssertionError(f"cell {index} raised:\n" + "\n".join(texts))
        return "\n".join(texts)

    def value(self, expr: str) -> Any:
        """Evaluate ``expr`` in the kernel (printed as JSON by a new cell) and return it."""
        out = self.run(f"import json as _json; print('CW=' + _json.dumps({expr}))")
        for line in reversed(out.splitlines()):
            if line.startswith("CW="):
                return json.loads(line[3:])
        raise AssertionError(f"no value printed for {expr!r}: {out!r}")

    def wait_value(self, expr: str, expected: Any, timeout_s: float = 30.0) -> Any:
        """Re-evaluate ``expr`` until it equals ``expected`` (clicks reach the kernel asynchronously)."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.value(expr)
            if got == expected:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"kernel: {expr} is {got!r}, expected {expected!r}")
            time.sleep(0.5)

    def view(self, index: int, name: str) -> Locator:
        """The ``[data-cw-view=name]`` root in cell ``index``'s output."""
        return self.cells.nth(index).locator(f'.jp-OutputArea-output [data-cw-view="{name}"]').first

    def display(self, code: str, name: str, timeout_s: float = CELL_TIMEOUT_S) -> Locator:
        """Run ``code`` (whose last line displays a widget) and return its view root once attached."""
        index = self.cells.count() - 1
        seen = len(self.log.page_errors), len(self.log.console_errors)
        self.run(code, timeout_s=timeout_s)
        log = self.log  # (JupyterLab's own page errors are not ours: only our errors since this cell count)
        return wait_attached(
            self.view(index, name), name, lambda: log.ours(log.page_errors[seen[0] :] + log.console_errors[seen[1] :]),
            60, 0.2,
        )  # fmt: skip
