"""The README's pictures of ``circuitwidgets report``: both shipped reports at 1,400 and 1,000 px.

Used by ``scripts/make_readme_images.py report``. Each report is written as
``circuitwidgets report --model NAME`` writes it (with the model's card, so its
training charts are there), opened offline in headless Chromium at each width,
captured whole once every view is drawn, and cropped to what a newcomer should
see first: from the composition section's heading to the end of the attention
view (the graph and maps of how the heads compose, then the induction head's
pattern). The crop is stored as a 256-colour PNG (fewer where that is over the size limit), to stay small. A model with shipped dictionaries (gelu-2l)
also gets its features part at 1,400 px: from its heading to the end of the attribution graph.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The shipped models whose reports are shown, and the page widths (px) they are shown at.
REPORTS: tuple[str, ...] = ("attn-only-2l-12h", "gelu-2l")
REPORT_WIDTHS: tuple[int, ...] = (1400, 1000)

#: The crop: from the top of the heading that starts with this text to the bottom of this view's widget.
CROP_FROM_HEADING = "Composition between layers"
CROP_TO_VIEW = "attention"

#: The features part's picture (models with shipped dictionaries): its crop and its width.
FEATURES_FROM_HEADING = "The features the induction answer reads"
FEATURES_TO_VIEW = "graph"
FEATURES_WIDTH = 1400
FEATURES_MODELS: tuple[str, ...] = ("gelu-2l",)

_CROP_JS = """
([heading, view]) => {
  const h = [...document.querySelectorAll("h2")].find((e) => e.textContent.startsWith(heading));
  const v = document.querySelector(`[data-cw-view="${view}"]`);
  if (!h || !v) return null;
  const top = h.getBoundingClientRect().top + scrollY, w = v.closest(".cw-widget") ?? v;
  return { top: Math.floor(top) - 8, bottom: Math.ceil(w.getBoundingClientRect().bottom + scrollY) + 8 };
}
"""


def image_names() -> list[str]:
    """The stems of the report pictures (``docs/images/<stem>.png``), in README order."""
    return [f"report-{model}-{width}" for model in REPORTS for width in REPORT_WIDTHS] + [
        f"report-{model}-features-{FEATURES_WIDTH}" for model in FEATURES_MODELS
    ]


def write_reports(directory: Path, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Write each shipped model's report into ``directory`` as the command does; return the pages by model."""
    import warnings

    from circuitwidgets.features.pretrained import list_pretrained_dictionaries
    from circuitwidgets.features.pretrained import load_pretrained as load_dictionaries
    from circuitwidgets.report import write_report
    from circuitwidgets.sources.pretrained import load_pretrained, pretrained_card

    pages = {}
    for model_name in REPORTS:
        started = time.monotonic()
        with warnings.catch_warnings():  # (gelu-2l: MLP paths are left out of the weight-space sections, as it says)
            warnings.simplefilter("ignore")
            model = load_pretrained(model_name)
            # (as the command does: a model's shipped dictionaries add the features part)
            dictionaries = load_dictionaries(model_name) if list_pretrained_dictionaries(model_name) else None
            pages[model_name] = write_report(
                model, directory / f"{model_name}.html", card=pretrained_card(model_name), dictionaries=dictionaries
            )
        log(f"wrote the report of {model_name} in {time.monotonic() - started:.0f}s")
    return pages


def _wait_all_drawn(page: Any, drawn_js: str, timeout_s: float = 60.0) -> None:
    """Until every view of the page is drawn (``drawn_js``: make_readme_images's test of one view's root)."""
    views = page.locator("[data-cw-view]:not([data-cw-view] [data-cw-view])")
    deadline = time.monotonic() + timeout_s
    for i in range(views.count()):
        view = views.nth(i)
        while not view.evaluate(drawn_js):
            if time.monotonic() > deadline:
                raise RuntimeError(f"view {view.get_attribute('data-cw-view')!r} was not drawn within {timeout_s:.0f}s")
            time.sleep(0.2)


def shoot_reports(
    browser: Any, pages: dict[str, Path], out_dir: Path, drawn_js: str, max_bytes: int, route: Callable[..., None]
) -> list[Path]:
    """Capture each report at each width, crop it, save it as ``out_dir/report-<model>-<width>.png``."""
    from PIL import Image

    written = []
    for model_name, path in pages.items():
        shots = [(width, CROP_FROM_HEADING, CROP_TO_VIEW, f"report-{model_name}-{width}") for width in REPORT_WIDTHS]
        if model_name in FEATURES_MODELS:
            name = f"report-{model_name}-features-{FEATURES_WIDTH}"
            shots.append((FEATURES_WIDTH, FEATURES_FROM_HEADING, FEATURES_TO_VIEW, name))
        for width, heading, last_view, stem in shots:
            context = browser.new_context(
                viewport={"width": width, "height": 900}, device_scale_factor=1, locale="en-US"
            )
            context.route("**/*", route)  # offline: only file:, data: and blob: load
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            page.goto(path.resolve().as_uri())
            page.locator(f'[data-cw-view="{last_view}"]').first.wait_for(timeout=60_000)
            _wait_all_drawn(page, drawn_js)
            page.evaluate("() => document.fonts.ready")
            if errors:
                raise RuntimeError(f"{model_name} at {width} px: the page raised {errors}")
            crop = page.evaluate(_CROP_JS, [heading, last_view])
            if crop is None:
                raise RuntimeError(f"{model_name}: no {heading!r} heading or {last_view!r} view")
            whole = Image.open(io.BytesIO(page.screenshot(full_page=True, animations="disabled")))
            context.close()
            target = out_dir / f"{stem}.png"
            rgb = whole.convert("RGB").crop((0, crop["top"], width, crop["bottom"]))
            for colours in (256, 128, 64):  # (a tall crop, the features part's, may need fewer colours to stay small)
                rgb.quantize(colors=colours).save(target, optimize=True)
                if target.stat().st_size <= max_bytes:
                    break
            if target.stat().st_size > max_bytes:
                raise RuntimeError(f"{target} is {target.stat().st_size} bytes, over the {max_bytes}-byte limit")
            written.append(target)
    return written
