"""Long-context attention in JupyterLab 4: how fast the view paints, in headless Chromium.

Input: ``q, k ~ N(0, 1)`` (``torch.randn``, seeded), float32 ``[n_layers, n_heads, N, 64]``,
tokens ``t0 … t{N-1}``; the widget is ``cw.AttentionPatterns.from_qk(tokens, q, k)`` (input ``qk``)
or, input ``dense``, ``cw.AttentionPatterns.from_arrays(tokens, attention)`` with ``attention``
the same heads' causal softmax as one dense float32 torch tensor ``[n_layers, n_heads, N, N]``
(as a TransformerLens or Hugging Face cache holds it; computed in the untimed cell).
Cases: N = 4,096 with 1 × 12 heads, N = 32,768 with 2 × 16 heads (``qk`` only: the dense
array would take 8.6 GB). Each case (and each
repeat) runs in a fresh notebook with a kernel of its own, in a real JupyterLab 4 page
(the browser tests' server and page helpers, ``tests/e2e/_hosts.py``, and their
chromium, ``tests/e2e/chromium.py``). A cell imports torch and circuitwidgets, another
draws ``q`` and ``k``; then the timed cell builds the widget and displays it. Measured
(page state polled every 20 ms):

- *output*: from Shift+Enter until the view's root (``[data-cw-view=attention]``) is in
  the cell's output: the kernel's build, the comm, the bundle loading, the first render;
- *selected head*: from the output appearing until the selected head is first painted
  (the view's ``data-cw-painted``, a page timestamp): its first band of overview rows,
  which the kernel sends as soon as it is final;
- *selected head whole*: from the output appearing until the selected head is painted
  with every row of its overview (``data-cw-painted-whole``);
- *cell done*: from Shift+Enter until the cell's prompt shows its number (polled);
- *all thumbnails*: from the output appearing until every thumbnail on screen shows its
  head: the grid's first paint frame (``data-cw-thumbs-at``, a page timestamp, recorded
  by a MutationObserver) after the last visible thumbnail lost ``cw-pending`` (its head's
  overview arrived), with every visible button painted (``data-cw-painted``). A head
  arriving is queued first, so it is painted in that frame. Thumbnails are drawn only
  when on screen (an IntersectionObserver with a 48 px margin,
  ``js/src/views/attention/visible.ts``); this script watches the buttons with the same
  observer and reports how many were visible;
- *total*: from Shift+Enter until all (visible) thumbnails are painted.

The heads other than the selected one are summarised by the kernel after the view asks
for them, so at 32K tokens the kernel's ``O(N² · d_head)`` work per head, not the view,
sets the time to all thumbnails. Timings are wall-clock on a shared machine: indicative.

Run::

    .venv/bin/python benchmarks/bench_lab_paint.py                 # N = 4,096 and 32,768
    .venv/bin/python benchmarks/bench_lab_paint.py --sizes 4096 --repeats 3
    .venv/bin/python benchmarks/bench_lab_paint.py --sizes 4096 --inputs qk dense --repeats 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the browser tests' helpers: tests/e2e is a package

from e2e._hosts import JupyterServer, jupyter_server  # noqa: E402
from e2e._notebook import NotebookPage  # noqa: E402
from e2e._pages import TIMEOUT_MS, watch  # noqa: E402
from e2e.chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

#: (layers, heads) per number of tokens; other sizes get 1 × 12.
SHAPES = {4096: (1, 12), 32768: (2, 16)}
D_HEAD = 64
POLL_S = 0.02

PREPARE = """\
_g = torch.Generator().manual_seed(0)
q = torch.randn({layers}, {heads}, {n}, {d}, generator=_g)
k = torch.randn({layers}, {heads}, {n}, {d}, generator=_g)
tokens = [f"t{{i}}" for i in range({n})]
print(tuple(q.shape))"""

#: The dense patterns of the same heads, for ``from_arrays`` (a causal softmax, one head at a time).
PREPARE_DENSE = """\
_mask = torch.ones({n}, {n}, dtype=torch.bool).triu_(1)
attention = torch.empty({layers}, {heads}, {n}, {n})
for _l in range({layers}):
    for _h in range({heads}):
        attention[_l, _h] = (q[_l, _h] @ k[_l, _h].T / {d} ** 0.5).masked_fill_(_mask, -torch.inf).softmax(-1)
del _mask
print(tuple(attention.shape))"""

#: The timed cell per input.
BUILD = {
    "qk": "w = cw.AttentionPatterns.from_qk(tokens, q, k)\nw",
    "dense": "w = cw.AttentionPatterns.from_arrays(tokens, attention)\nw",
}

#: One poll of the cell: the page clock, the view's state, the visible thumbnails' state.
SNAPSHOT = """(index) => {
  const now = performance.now();
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[index];
  const prompt = cell?.querySelector('.jp-InputPrompt')?.textContent ?? '';
  const view = cell?.querySelector('.jp-OutputArea-output [data-cw-view="attention"]');
  if (!view) return {now, prompt, view: false};
  const box = view.querySelector('[data-cw-thumbs]');
  const buttons = box ? [...box.querySelectorAll('button.cw-thumb')] : [];
  let seen = window.__cwSeen;
  if (buttons.length && (!seen || seen.box !== box)) {
    seen = window.__cwSeen = {box, visible: new Set(), fired: false, paints: [], readyAt: 0, pending: false};
    const pendingNow = () => [...seen.visible].some((b) => b.classList.contains('cw-pending'));
    // the buttons on screen, watched as the view's painter watches them (visible.ts)
    seen.io = new IntersectionObserver((entries) => {
      for (const e of entries) e.isIntersecting ? seen.visible.add(e.target) : seen.visible.delete(e.target);
      seen.fired = true;
      seen.pending = pendingNow();
    }, {rootMargin: '48px'});
    buttons.forEach((b) => seen.io.observe(b));
    // every paint frame of the grid (its data-cw-thumbs-at), and when the last visible head became ready
    new MutationObserver((records) => {
      const at = Number(box.dataset.cwThumbsAt);
      if (records.some((r) => r.attributeName === 'data-cw-thumbs-at') && seen.paints.at(-1) !== at) seen.paints.push(at);
      const pending = pendingNow();
      if (seen.pending && !pending) seen.readyAt = performance.now();
      seen.pending = pending;
    }).observe(box, {subtree: true, attributes: true, attributeFilter: ['class', 'data-cw-thumbs-at']});
  }
  const visible = seen && seen.box === box ? [...seen.visible] : [];
  return {
    now, prompt, view: true,
    painted: view.dataset.cwPainted ?? null,
    whole: view.dataset.cwPaintedWhole ?? null,
    thumbs: buttons.length,
    observed: Boolean(seen && seen.fired),
    visible: visible.length,
    pending: visible.filter((b) => b.classList.contains('cw-pending')).length,
    unpainted: visible.filter((b) => b.dataset.cwPainted !== '1').length,
    readyAt: seen ? seen.readyAt : 0,
    paints: seen ? seen.paints : [],
    thumbsAt: box?.dataset.cwThumbsAt ? Number(box.dataset.cwThumbsAt) : null,
    thumbsMs: box?.dataset.cwThumbsMs ? Number(box.dataset.cwThumbsMs) : null,
  };
}"""


def shut_down(jupyter: JupyterServer, kernel: str) -> None:
    """Stop a measured kernel (its q, k and widget hold up to a few GB at 32K tokens)."""
    request = urllib.request.Request(
        f"{jupyter.url}/api/kernels/{kernel}", method="DELETE", headers={"Authorization": f"token {jupyter.token}"}
    )
    with suppress(urllib.error.URLError), urllib.request.urlopen(request, timeout=60):  # 404: gone already
        pass


def type_and_run(notebook: NotebookPage, code: str) -> int:
    """Put ``code`` in the last (empty) cell and press Shift+Enter; return the cell's index."""
    index = notebook.cells.count() - 1
    notebook.no_dialog()
    notebook.cells.nth(index).locator(".cm-content").first.click()
    notebook.page.keyboard.press("Control+a")
    notebook.page.keyboard.press("Delete")
    notebook.page.keyboard.insert_text(code)
    notebook.page.keyboard.press("Shift+Enter")
    return index


def measure(notebook: NotebookPage, build: str, timeout_s: float) -> dict[str, Any]:
    """Run the build cell and poll the page until every visible thumbnail is painted."""
    index = type_and_run(notebook, build)
    sent = time.monotonic()
    out: dict[str, Any] = {}
    while True:
        s = notebook.page.evaluate(SNAPSHOT, index)
        t = time.monotonic()
        offset = t - s["now"] / 1000  # page clock (ms) → monotonic (s)
        if "cell_s" not in out and "*" not in s["prompt"] and any(c.isdigit() for c in s["prompt"]):
            out["cell_s"] = t - sent
        if s["view"]:
            out.setdefault("output_at", t)
            if s["painted"] is not None and "head_at" not in out:
                out["head_at"] = offset + float(s["painted"]) / 1000
            if s["whole"] is not None and "whole_at" not in out:
                out["whole_at"] = offset + float(s["whole"]) / 1000
            # the first paint frame of the grid after the last visible head became ready
            after = [p for p in s["paints"] or [s["thumbsAt"] or 0] if p >= s["readyAt"]]
            done = s["observed"] and s["visible"] and not s["pending"] and not s["unpainted"] and after
            if done and "whole_at" in out:
                out.update(thumbs_at=offset + min(after) / 1000, thumbs=s["thumbs"], visible=s["visible"])
                out["thumbs_ms"] = float(s["thumbsMs"] or "nan")
                ready = offset + s["readyAt"] / 1000 - out["output_at"] if s["readyAt"] else float("nan")
                frames = len(s["paints"])
                print(
                    f"  last visible head ready {ready:.2f}s after the output; {frames} grid paint frames",
                    file=sys.stderr,
                )
                break
        if t - sent > timeout_s:
            raise TimeoutError(f"not all thumbnails painted within {timeout_s:.0f}s; last poll: {json.dumps(s)}")
        time.sleep(POLL_S)
    errors = notebook.log.ours(notebook.log.page_errors + notebook.log.console_errors)
    if errors:
        print(f"  page errors: {errors[:3]}", file=sys.stderr)
    output_s = out["output_at"] - sent
    return {
        "output_s": output_s,
        "cell_s": out.get("cell_s", float("nan")),
        "head_s": out["head_at"] - out["output_at"],
        "whole_s": out["whole_at"] - out["output_at"],
        "thumbs_s": out["thumbs_at"] - out["output_at"],
        "total_s": out["thumbs_at"] - sent,
        "thumbs": f"{out['visible']} of {out['thumbs']}",
        "thumbs_ms": out["thumbs_ms"],
    }


def run_case(
    jupyter: JupyterServer, browser: Any, n: int, inputs: str, repeat: int, timeout_s: float
) -> dict[str, Any]:
    layers, heads = SHAPES.get(n, (1, 12))
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1, locale="en-US")
    context.set_default_timeout(TIMEOUT_MS)
    path = jupyter.write_notebook(f"paint-{n}-{inputs}-{repeat}.ipynb")
    notebook = NotebookPage(context.new_page(), watch(context))
    try:
        notebook.open(jupyter, path)
        notebook.run("import torch, circuitwidgets as cw", timeout_s=180)
        notebook.run(PREPARE.format(layers=layers, heads=heads, n=n, d=D_HEAD), timeout_s=300)
        if inputs == "dense":
            notebook.run(PREPARE_DENSE.format(layers=layers, heads=heads, n=n, d=D_HEAD), timeout_s=300)
        result = measure(notebook, BUILD[inputs], timeout_s)
    finally:
        context.close()
        if notebook.kernel_id:  # (set as soon as the session is made)
            shut_down(jupyter, notebook.kernel_id)
    return {"N": n, "input": inputs, "heads": f"{layers} × {heads}", **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 32768], help="token counts")
    parser.add_argument(
        "--inputs", nargs="+", choices=sorted(BUILD), default=["qk"], help="from_qk (qk) and/or from_arrays (dense)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="fresh notebooks (and kernels) per size")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement at most")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from circuitwidgets.widgets.core.base import BUNDLE_PATH

    newer = [p for p in (REPO / "js" / "src").rglob("*.ts") if p.stat().st_mtime > BUNDLE_PATH.stat().st_mtime]
    if newer:
        print(f"warning: {BUNDLE_PATH} is older than {newer[0]} (run `npm --prefix js run build`)", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, jupyter_server(Path(tmp)) as jupyter, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            for n in args.sizes:
                for repeat in range(args.repeats):
                    for inputs in args.inputs:  # (interleaved, so that both see the same load)
                        print(f"N = {n}, {inputs}, run {repeat + 1} of {args.repeats} …", file=sys.stderr, flush=True)
                        rows.append(run_case(jupyter, browser, n, inputs, repeat, args.timeout))
        finally:
            browser.close()
    print(
        "| N | input | heads | output after Shift+Enter (s) | cell done (s) | selected head first painted (s) "
        "| selected head painted whole (s) | all thumbnails painted (s) | thumbnails visible "
        "| thumbnail paint time (ms) | total (s) |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['N']:,} | {r['input']} | {r['heads']} | {r['output_s']:.2f} | {r['cell_s']:.2f} | {r['head_s']:.2f} "
            f"| {r['whole_s']:.2f} "
            f"| {r['thumbs_s']:.2f} | {r['thumbs']} | {r['thumbs_ms']:.0f} | {r['total_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
