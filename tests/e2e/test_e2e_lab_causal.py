"""The causal views live in JupyterLab 4, linked to an attention view: clicks move the kernel and the other views,
hover shows the numbers the kernel holds, and the exported figures carry no controls.

One notebook, one kernel, one cell that builds and shows all five views on
``attn-only-2l-12h`` (the offline page of tests/e2e/test_e2e_causal_views.py,
live): a head-patching map (layer × head), a ``resid_pre`` patching map (layer
× position), an attention view of the clean prompt, a logit lens of it and a
direct logit attribution by head, linked with ``cw.link``. The tests share
that page, and none relies on a selection another made; each reads the kernel
back with a cell of its own (``NotebookPage.value``). On 2 loaded cores the
module takes about 35 s, most of it starting the server and the kernel and
the one cell that builds the views; the tests themselves take 1–2 s each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, Locator, Page

from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import TIMEOUT_MS, assert_drawn, assert_figure_has_no_controls, is_styled, screenshot, wait_status, watch

#: The clean prompt: [BOS] r r[:19] (20 random tokens r, then its first 19 again); the corrupted prompt replaces the
#: first r; the metric is the logit difference between r[19] and the corrupted run's answer at the last position,
#: normalised (0 corrupted, 1 clean), as in notebooks/04_causal_induction.ipynb.
BUILD = """\
import torch, circuitwidgets as cw
from circuitwidgets import causal
from IPython.display import display
model = cw.load_pretrained("attn-only-2l-12h")
_g = torch.Generator().manual_seed(0)
first, other = torch.randint(1, 2048, (2, 1, 20), generator=_g)
bos = torch.zeros(1, 1, dtype=torch.long)
clean = torch.cat([bos, first, first[:, :19]], dim=1)
corrupted = torch.cat([bos, other, first[:, :19]], dim=1)
answer, wrong = int(first[0, 19]), int(other[0, 19])
metric = causal.normalised(causal.logit_diff([answer], [wrong]))
heads = cw.PatchingMap(causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "head")))
positions = cw.PatchingMap(causal.patch(model, clean, corrupted, metric, site="resid_pre", by=("layer", "pos")))
attention = cw.AttentionPatterns(model, clean[0])
lens = cw.LogitLens(causal.logit_lens(model, clean))
bars = cw.LogitAttribution(causal.logit_attribution(model, clean, (answer, wrong), by="head"))
group = cw.link(heads, positions, attention, lens, bars)
print(group)
display(heads, positions, attention, lens, bars)"""

#: Cells the tests click and hover, none of them what ``BUILD`` selects at first (the strongest head, L1H7, and the
#: strongest position, 20), so each click must change the views.
HEAD = (0, 11)
POSITION = (1, 33)  # a token of the repeated half
LENS_CELL = (1, 30)  # (row: the stream before layer 1, position)
BAR = "L1H9"


@dataclass
class Views:
    """The page and its five views (in the order ``BUILD`` shows them)."""

    lab: NotebookPage
    heads: Locator
    positions: Locator
    attention: Locator
    lens: Locator
    bars: Locator

    @property
    def page(self) -> Page:
        """The JupyterLab page (a failing test's screenshot is taken of it)."""
        return self.lab.page


@pytest.fixture(scope="module")
def views(jupyter: JupyterServer, browser: Browser) -> Iterator[Views]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        lab = NotebookPage(context.new_page(), watch(context))
        path = jupyter.write_notebook("causal.ipynb")
        lab.open(jupyter, path)
        index = lab.cells.count() - 1
        out = lab.run(BUILD)
        assert "selected_layer, selected_head, selected_dest" in out, f"not linked as expected: {out!r}"
        cell = lab.cells.nth(index)
        found = {}
        for key, name, nth in (
            ("heads", "patchingmap", 0),
            ("positions", "patchingmap", 1),
            ("attention", "attention", 0),
            ("lens", "logitlens", 0),
            ("bars", "logitattribution", 0),
        ):
            view = cell.locator(f'.jp-OutputArea-output [data-cw-view="{name}"]').nth(nth)
            view.wait_for(timeout=60_000)
            assert_drawn(view)
            assert is_styled(view), f"{key}: no stylesheet rule reaches the view"
            found[key] = view
        yield Views(lab, **found)
    finally:
        context.close()


@pytest.fixture(autouse=True)
def no_new_page_error(views: Views) -> Iterator[None]:
    """Each test answers for the uncaught errors raised while it ran."""
    seen = len(views.lab.log.page_errors)
    yield
    new = views.lab.log.page_errors[seen:]
    assert not new, "uncaught errors in the page:\n" + "\n".join(new)


def shown_number(text: str) -> tuple[float, float]:
    """A number as a view writes it (``−0.38``, ``+1.234``, ``31%``) and half its last digit (the rounding allowed)."""
    text = text.replace("\u2212", "-").rstrip("%")
    decimals = len(text.split(".", 1)[1]) if "." in text else 0
    return float(text), 0.5 * 10**-decimals + 1e-9


def assert_shown(text: str, exact: float, what: str) -> None:
    shown, tolerance = shown_number(text)
    assert abs(shown - exact) <= tolerance, f"{what}: the view shows {text}, the kernel holds {exact}"


def tooltip(view: Locator, selector: str) -> str:
    """The ``<title>`` (the browser's tooltip) of the element ``selector`` in ``view``."""
    return view.locator(selector).first.evaluate("(g) => g.querySelector(':scope > title')?.textContent ?? ''")


def test_a_head_cell_click_moves_the_linked_attention_view_and_the_kernel_to_that_head(views: Views) -> None:
    layer, head = HEAD
    heads, attention, bars = views.heads, views.attention, views.bars
    start = wait_status(attention, r"^Layer \d+, head \d+ ")
    assert not start.startswith(f"Layer {layer}, head {head} "), f"the view starts on the head the test clicks: {start}"
    heads.scroll_into_view_if_needed()
    heads.locator(f'[data-cw-layer="{layer}"][data-cw-col="{head}"] rect').first.click()
    status = wait_status(heads, rf"^L{layer}H{head}: ([−\d.]+) \(selected\)$")
    wait_status(attention, rf"^Layer {layer}, head {head} ")
    wait_status(bars, rf"^L{layer}H{head}: [+−][\d.]+ \(running sum [−\d.]+\) selected")
    screenshot(views.lab.page, "jupyterlab-causal-head-click")  # (the window: the maps and the attention view)
    linked = "[w.selected_layer, w.selected_head] for w in (heads, attention, bars)"
    views.lab.wait_value(f"[{linked}]", [[layer, head]] * 3)
    shown = re.search(r": ([−\d.]+) ", status).group(1)  # type: ignore[union-attr]
    assert_shown(shown, views.lab.value(f"heads.values[0, {layer}, {head}]"), f"L{layer}H{head} of the head map")


def test_a_layer_position_cell_click_selects_that_token_in_the_attention_view_and_the_lens(views: Views) -> None:
    layer, pos = POSITION
    positions, attention, lens = views.positions, views.attention, views.lens
    positions.scroll_into_view_if_needed()
    positions.locator(f'[data-cw-layer="{layer}"][data-cw-col="{pos}"] rect').first.click()
    status = wait_status(positions, rf"^L{layer} · pos {pos} '[^']*': ([−\d.]+) \(selected\)$")
    wait_status(attention, rf"^Layer \d+, head \d+ \(raw pattern\) · destination {pos} “[^”]*” attends most to ")
    wait_status(lens, rf"^\S+ · pos {pos} '[^']*' predicts .*\(selected\)$")
    screenshot(views.lab.page, "jupyterlab-causal-position-click")
    views.lab.wait_value(
        "[positions.selected_layer, positions.selected_pos, attention.selected_dest, lens.selected_pos]",
        [layer, pos, pos, pos],
    )
    kernel = views.lab.value(
        "{'tokens': [attention.tokens[attention.selected_dest], positions.clean_tokens[positions.selected_pos]],"
        " 'value': float(positions.values[0, positions.selected_layer, positions.selected_pos]),"
        " 'head': [attention.selected_layer, attention.selected_head] == [heads.selected_layer, heads.selected_head]}"
    )
    assert kernel["tokens"][0] == kernel["tokens"][1], f"the attention view selected another token: {kernel['tokens']}"
    assert_shown(re.search(r": ([−\d.]+) ", status).group(1), kernel["value"], f"L{layer} pos {pos}")  # type: ignore[union-attr]
    # a map of the residual stream has no heads: the click left the attention view's head where it was
    assert kernel["head"], "a click on a position map moved the attention view's head"


def test_the_lens_and_the_attribution_answer_hover_with_the_kernels_numbers(views: Views) -> None:
    lab, lens, bars = views.lab, views.lens, views.bars
    row, pos = LENS_CELL
    lens.scroll_into_view_if_needed()
    cell = f'[data-cw-row="{row}"][data-cw-pos="{pos}"]'
    lens.locator(f"{cell} rect").first.hover()
    status = wait_status(lens, rf"^\S+( \S+)? · pos {pos} '[^']*' predicts ")
    assert tooltip(lens, cell) == status, "the cell's tooltip and the status differ"
    shown = re.findall(r"'[^']*' ([\d.]+%)", status.split(" predicts ", 1)[1])
    kernel = lab.value(
        f"{{'label': lens.layer_labels[{row}], 'probs': lens.top_probs[{row}, {pos}].tolist(),"
        f" 'bars': dict(zip(bars.labels, bars.values.tolist())), 'order': bars.labels}}"
    )
    assert status.startswith(f"{kernel['label']} · pos {pos} ")
    assert len(shown) == len(kernel["probs"]) == 5, (shown, kernel["probs"])
    for text, p in zip(shown, kernel["probs"], strict=True):
        assert_shown(text, 100 * p, f"lens {kernel['label']} pos {pos}")

    layer, head = int(BAR[1]), int(BAR[3:])
    bars.scroll_into_view_if_needed()
    bar = f'[data-cw-layer="{layer}"][data-cw-head="{head}"]'
    bars.locator(f"{bar} rect").first.hover()
    status = wait_status(bars, rf"^{BAR}: ([+−][\d.]+) \(running sum ([−\d.]+)\)$")
    assert tooltip(bars, bar) == status, "the bar's tooltip and the status differ"
    value, running = re.search(r": ([+−][\d.]+) \(running sum ([−\d.]+)\)", status).groups()  # type: ignore[union-attr]
    order = kernel["order"]
    assert_shown(value, kernel["bars"][BAR], BAR)
    assert_shown(running, sum(kernel["bars"][label] for label in order[: order.index(BAR) + 1]), f"{BAR}'s running sum")


def test_a_selection_set_in_the_kernel_moves_every_linked_view(views: Views) -> None:
    views.lab.page.mouse.move(2, 2)  # off the views: their statuses say the selection, not a hovered cell
    views.lab.run("attention.selected_layer, attention.selected_head, attention.selected_dest = 1, 4, 25")
    wait_status(views.heads, r"^L1H4: [−\d.]+ selected;")
    wait_status(views.bars, r"^L1H4: [+−][\d.]+ \(running sum [−\d.]+\) selected;")
    wait_status(views.positions, r"^L\d · pos 25 '[^']*': [−\d.]+ selected;")
    wait_status(views.lens, r"^\S+( \S+)? · pos 25 '[^']*' predicts .*\(selected\)$")
    wait_status(views.attention, r"^Layer 1, head 4 \(raw pattern\) · destination 25 ")


@pytest.mark.parametrize(
    ("key", "title"),
    [("heads", "activation patching of z"), ("positions", "activation patching of resid_pre"),
     ("lens", "Logit lens"), ("bars", "Direct logit attribution")],
)  # fmt: skip
def test_their_figures_exported_from_jupyterlab_carry_no_controls(key: str, title: str, views: Views) -> None:
    view: Locator = getattr(views, key)
    view.scroll_into_view_if_needed()
    assert_figure_has_no_controls(views.lab.page, view, title)


def test_the_session_reached_no_host_but_its_server_and_raised_no_error(views: Views) -> None:
    log = views.lab.log
    assert not log.network(allowed_hosts=("127.0.0.1",)), log.network(allowed_hosts=("127.0.0.1",))
    assert not log.page_errors, log.page_errors
    assert not log.ours(log.console_errors), log.ours(log.console_errors)
    assert not log.dialogs, log.dialogs
