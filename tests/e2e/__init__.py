"""Real-browser tests (Playwright + Debian chromium): JupyterLab, Notebook 7, marimo, exported pages."""
