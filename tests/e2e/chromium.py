"""The one browser every headless page in this repository runs in: Debian's chromium, never a download.

Shared by the browser tests, ``benchmarks/bench_attention.py`` and
``scripts/make_readme_images.py`` (which read it with ``runpy``, so this
module imports nothing).
"""

from pathlib import Path

#: Debian's chromium (``apt-get install chromium``; ``make setup`` does it).
CHROMIUM = Path("/usr/bin/chromium")

#: Flags of every launch: headless, and nothing that reaches the network on its own.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
