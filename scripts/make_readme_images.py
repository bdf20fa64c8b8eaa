"""Screenshot every view for the README, from the shipped models.

Usage::

    .venv/bin/python scripts/make_readme_images.py              # every view
    .venv/bin/python scripts/make_readme_images.py eigen explorer
    .venv/bin/python scripts/make_readme_images.py report   # the two reports at 1,400 and 1,000 px

Each view is built from the shipped models the way the notebooks build it, written
with :func:`circuitwidgets.save_html` into a temporary directory, opened from
``file://`` in Debian's headless chromium (``/usr/bin/chromium``, driven by
Playwright; never a downloaded browser, and every non-file request is aborted),
and screenshotted, cropped to the widget, into ``docs/images/<view>.png``.

``report`` writes both shipped reports as ``circuitwidgets report`` does and
saves each at 1,400 and 1,000 px, cropped, as ``docs/images/report-<model>-<width>.png``
(``scripts/report_images.py``).

``tests/test_notebooks.py`` checks that :data:`VIEWS` with the report's pictures,
the PNGs in ``docs/images`` and the images the README shows are the same set, so
none can go missing.
"""

from __future__ import annotations

import argparse
import functools
import runpy
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO / "docs" / "images"
_BROWSER = runpy.run_path(str(REPO / "tests" / "e2e" / "chromium.py"))
CHROMIUM: Path = _BROWSER["CHROMIUM"]
CHROMIUM_ARGS: list[str] = _BROWSER["CHROMIUM_ARGS"]
#: The report's pictures (``report``): both shipped reports at 1,400 and 1,000 px (scripts/report_images.py).
REPORT_IMAGES = runpy.run_path(str(REPO / "scripts" / "report_images.py"))

#: The views shown in the README, one PNG each (``docs/images/<view>.png``), in README order.
VIEWS: tuple[str, ...] = (
    "attention",
    "eigen",
    "skiptrigrams",
    "composition",
    "termimportance",
    "explorer",
    "patchingmap",
    "logitlens",
    "logitattribution",
    "compvspatching",
)

#: Largest PNG the script accepts, bytes.
MAX_BYTES = 250_000

#: Page width per view (the widget lays itself out to it), px.
WIDTHS = {"explorer": 1180, "logitlens": 1180}
DEFAULT_WIDTH = 980

#: Device pixels per CSS pixel per view: the explorer holds every view at once, so it is
#: drawn a little smaller to keep its PNG under :data:`MAX_BYTES`.
SCALES = {"explorer": 0.7}

_DRAWN_JS = """
(root) => {
  const r = root.getBoundingClientRect();
  if (r.width < 10 || r.height < 10) return false;
  const canvases = [...root.querySelectorAll("canvas")].filter((c) => c.width > 0 && c.height > 0);
  const painted = canvases.some((c) => {
    const ctx = c.getContext("2d");
    if (!ctx) return false;
    const data = ctx.getImageData(0, 0, c.width, c.height).data;
    for (let i = 4; i < data.length; i += 4) {
      if (data[i] !== data[0] || data[i + 1] !== data[1] || data[i + 2] !== data[2] || data[i + 3] !== data[3]) return true;
    }
    return false;
  });
  const shapes = root.querySelectorAll("svg circle, svg rect, svg path, svg line").length;
  const rows = root.querySelectorAll("[data-cw-row]").length;
  return painted || shapes >= 3 || rows >= 1;
}
"""


# ----------------------------------------------------------------------------- the views


class _Models:
    """The shipped models and the inputs the views share, loaded once."""

    def __init__(self) -> None:
        import numpy as np
        import torch

        import circuitwidgets as cw
        from circuitwidgets import circuits
        from circuitwidgets.training.corpus import load_stdlib_corpus

        self.cw, self.circuits, self.np, self.torch = cw, circuits, np, torch
        self.model2 = cw.load_pretrained("attn-only-2l")
        self.held_out = load_stdlib_corpus().val
        induction = circuits.head_scores(self.model2, "induction")
        layer, head = np.unravel_index(int(np.argmax(induction)), induction.shape)
        self.induction_head = (int(layer), int(head))

    @functools.cached_property
    def induction(self) -> Any:
        """Notebook 04's induction prompts on ``attn-only-2l-12h``: ``(model, clean, corrupted, answers)``.

        Clean: 8 prompts ``[BOS] r r[:19]`` of 20 random tokens ``r`` (induction predicts
        ``r[19]`` at the last position); corrupted (notebook 04's corruption A): the first
        ``r`` replaced by other random tokens; answers: ``(r[19], other[19])`` per prompt.
        """
        from circuitwidgets.causal.induction import induction_prompts

        model = self.cw.load_pretrained("attn-only-2l-12h")
        p = induction_prompts(model)  # the README's one prompt set (causal.induction.induction_test)
        return model, p.clean, p.corrupt_a, (p.answer.tolist(), p.control.tolist())

    def windows(self, n: int = 8) -> Any:
        """``[n, 256]`` token windows of held-out standard-library code, each starting with BOS."""
        ids = self.model2.tokenizer.encode("\n".join(self.held_out))
        bos = self.model2.tokenizer.bos_token_id
        return self.torch.tensor([[bos, *ids[i * 255 : (i + 1) * 255]] for i in range(n)])


def _attention(m: _Models) -> Any:
    """The two-layer model on repeated random tokens, the strongest induction head selected."""
    seq_len = 16
    tokens = m.circuits.repeated_random_tokens(m.model2, seq_len=seq_len, n_seqs=1, seed=1)[0]
    layer, head = m.induction_head
    dest = 1 + seq_len + seq_len // 2  # a token of the repeated half
    return m.cw.AttentionPatterns(
        m.model2, tokens, selected_layer=layer, selected_head=head, selected_dest=dest, show_diagonals=True
    )


def _eigen(m: _Models) -> Any:
    layer, head = m.induction_head
    return m.cw.EigenScatter(m.model2, selected_layer=layer, selected_head=head)


def _skiptrigrams(m: _Models) -> Any:
    """The two-layer model's strongest induction head: its largest skip-trigrams, mostly copies."""
    layer, head = m.induction_head
    return m.cw.SkipTrigramTable(m.model2, layer=layer, head=head)


def _composition(m: _Models) -> Any:
    np = m.np
    widget = m.cw.CompositionMap(m.model2, kind="K")
    k = widget.score("K")
    l1, h1, l2, h2 = (int(i) for i in np.unravel_index(int(np.nanargmax(k)), k.shape))
    widget.select_edge((l1, h1), (l2, h2), "K")
    return widget


def _termimportance(m: _Models) -> Any:
    return m.cw.TermImportance(m.model2, m.windows())


def _explorer(m: _Models) -> Any:
    return m.cw.CircuitExplorer(m.model2, m.held_out[0][:240])


def _patchingmap(m: _Models) -> Any:
    """Notebook 04's head patching: each head's output restored from the clean run into the corrupted one;
    the head that restores most selected."""
    np = m.np
    from circuitwidgets import causal

    model, clean, corrupted, answers = m.induction
    metric = causal.normalised(causal.logit_diff(*answers))
    sweep = causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "head"))
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(sweep.values)), sweep.values.shape))
    return m.cw.PatchingMap(sweep, selected_layer=layer, selected_head=head)


#: The logit lens's prompt: Python whose last tokens repeat an earlier ``.value``.
LENS_PROMPT = "def add(self, other):\n    return self.value + other.value"


def _logitlens(m: _Models) -> Any:
    """The model with MLPs on a line of Python: which layer's stream predicts the repeated ``value``."""
    from circuitwidgets import causal

    gelu = m.cw.load_pretrained("gelu-2l")
    lens = m.cw.LogitLens(causal.logit_lens(gelu, LENS_PROMPT))
    lens.selected_pos = len(lens.tokens) - 2  # the second "." (after " other"): what comes next?
    return lens


def _logitattribution(m: _Models) -> Any:
    """The clean prompts' logit difference (answer − control), split by head."""
    from circuitwidgets import causal

    model, clean, _, answers = m.induction
    return m.cw.LogitAttribution(causal.logit_attribution(model, clean, answers, by="head"))


def _compvspatching(m: _Models) -> Any:
    """Notebook 04's corruption B (only the earlier occurrence of the last token changed): K-composition against
    path patching via the later heads' keys, every pair of heads."""
    from circuitwidgets import causal
    from circuitwidgets.causal.induction import induction_prompts

    model = m.cw.load_pretrained("attn-only-2l-12h")
    p = induction_prompts(model)  # the README's one prompt set and metric (answer − control)
    metric = causal.normalised(p.metric)
    return m.cw.CompositionVsPatching(model, causal.path_patch(model, p.clean, p.corrupt_b, metric, via="k"))


BUILDERS: dict[str, Callable[[_Models], Any]] = {
    "attention": _attention,
    "eigen": _eigen,
    "skiptrigrams": _skiptrigrams,
    "composition": _composition,
    "termimportance": _termimportance,
    "explorer": _explorer,
    "patchingmap": _patchingmap,
    "logitlens": _logitlens,
    "logitattribution": _logitattribution,
    "compvspatching": _compvspatching,
}


# ----------------------------------------------------------------------------- screenshots


def _collect(errors: list[str]) -> Callable[[Any], None]:
    """A page-error listener appending to this page's own list (bound now, not to a later page's)."""

    def add(exc: Any) -> None:
        errors.append(str(exc))

    return add


def _wait_drawn(view: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not view.evaluate(_DRAWN_JS):
        if time.monotonic() > deadline:
            raise RuntimeError(f"view {view.get_attribute('data-cw-view')!r} was not drawn within {timeout_s:.0f}s")
        time.sleep(0.2)


def offline(route: Any) -> None:
    """Offline, as an exported page is meant to be: only file:, data: and blob: load."""
    if route.request.url.split(":", 1)[0] in ("file", "data", "blob"):
        route.continue_()
    else:
        route.abort()


def report_pictures(out_dir: Path) -> list[Path]:
    """Write both shipped reports as ``circuitwidgets report`` does and save their pictures into ``out_dir``."""
    from playwright.sync_api import sync_playwright

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="readme-reports-") as tmp, sync_playwright() as pw:
        pages = REPORT_IMAGES["write_reports"](Path(tmp))
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            written: list[Path] = REPORT_IMAGES["shoot_reports"](browser, pages, out_dir, _DRAWN_JS, MAX_BYTES, offline)
        finally:
            browser.close()
    return written


def screenshot(pages: dict[str, Path], out_dir: Path) -> dict[str, Path]:
    """Open each saved page offline in headless chromium and save the widget as ``out_dir/<view>.png``."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: `apt-get install -y chromium` (`make setup` does it)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            for name, page_path in pages.items():
                context = browser.new_context(
                    viewport={"width": WIDTHS.get(name, DEFAULT_WIDTH), "height": 900},
                    device_scale_factor=SCALES.get(name, 1),
                    locale="en-US",
                )
                context.route("**/*", offline)
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", _collect(errors))
                page.goto(page_path.resolve().as_uri())
                view = page.locator(f'[data-cw-view="{name}"]').first
                view.wait_for(timeout=30_000)
                _wait_drawn(view)
                page.wait_for_timeout(300)  # let fonts and the last frame settle
                if errors:
                    raise RuntimeError(f"{name}: the page raised {errors}")
                target = out_dir / f"{name}.png"
                page.locator(".cw-widget").first.screenshot(path=str(target), animations="disabled")
                size = target.stat().st_size
                if size > MAX_BYTES:
                    raise RuntimeError(f"{target} is {size} bytes, over the {MAX_BYTES}-byte limit")
                written[name] = target
                context.close()
        finally:
            browser.close()
    return written


def ensure_bundle() -> None:
    """Rebuild the views' bundle when ``js/src`` is newer, so the pictures show the current views."""
    import subprocess

    from circuitwidgets.widgets.core.base import BUNDLE_PATH

    src = REPO / "js" / "src"
    if not src.is_dir() or REPO not in BUNDLE_PATH.parents:
        return  # an installed package: its bundle is what it is
    built_at = BUNDLE_PATH.stat().st_mtime if BUNDLE_PATH.is_file() else 0.0
    if all(p.stat().st_mtime <= built_at for p in src.rglob("*.ts")):
        return
    if not (REPO / "js" / "node_modules").is_dir():
        raise SystemExit(f"{BUNDLE_PATH} is missing or older than js/src: run `make setup`")
    print("js/src is newer than the bundle: npm --prefix js run build", flush=True)
    subprocess.run(["npm", "--prefix", "js", "run", "build"], cwd=REPO, check=True, capture_output=True, timeout=300)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "views", nargs="*", help=f"views to draw (default all: {', '.join(VIEWS)}), and `report` for the report's"
    )
    parser.add_argument(
        "--out", type=Path, default=IMAGES, help=f"output directory (default {IMAGES.relative_to(REPO)})"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.views) - {*VIEWS, "report"})
    if unknown:
        parser.error(f"unknown views {unknown}; expected some of {[*VIEWS, 'report']}")
    names = [n for n in args.views if n != "report"] if args.views else list(VIEWS)
    assert set(BUILDERS) == set(VIEWS), "every view needs a builder"

    import circuitwidgets as cw

    ensure_bundle()
    if not args.views or "report" in args.views:
        for path in report_pictures(args.out):
            print(f"wrote {path.name} ({path.stat().st_size / 1e3:.0f} kB)", flush=True)
    if not names:
        return 0
    models = _Models()
    with tempfile.TemporaryDirectory(prefix="readme-images-") as tmp:
        pages = {}
        for name in names:
            started = time.monotonic()
            widget = BUILDERS[name](models)
            pages[name] = cw.save_html(widget, Path(tmp) / f"{name}.html", title=name)
            print(f"built {name} in {time.monotonic() - started:.1f}s", flush=True)
        for path in screenshot(pages, args.out).values():
            print(
                f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ({path.stat().st_size / 1e3:.0f} kB)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
