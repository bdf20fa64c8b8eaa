"""Hosts the browser tests drive: a Jupyter server (JupyterLab 4 and Notebook 7) and marimo.

A notebook page on the Jupyter server is driven by :class:`._notebook.NotebookPage`.

Servers listen on 127.0.0.1 on a random free port with a random token, run in
their own process group from a temporary directory, and are always stopped
(the fixtures call :meth:`Server.stop` in ``finally``). Every wait has a timeout.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: How long a server may take to answer (the CI machine has 2 loaded cores).
START_TIMEOUT_S = 120


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process: started in its own process group, stopped with its children."""

    def __init__(self, name: str, argv: list[str], cwd: Path, env: dict[str, str], probe_url: str) -> None:
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.probe_url = probe_url
        self.log_path = cwd / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before answering:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.probe_url, timeout=5) as response:
                    if response.status < 500:
                        return
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} did not answer {self.probe_url} within {timeout_s:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.3)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the server's process group (kernels included); kill it after 15 s."""
        proc = self.proc
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                # the server is gone; its children (kernels) may linger in the group
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc = None


def _isolated_env(root: Path) -> dict[str, str]:
    """Environment with Jupyter and IPython reading config and writing state only under ``root``."""
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "jupyter-config"),
        ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"),
        ("IPYTHONDIR", "ipython"),
        ("MPLCONFIGDIR", "mpl"),
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(root / sub)
    # Kernels, nbconvert and marimo import the package under test, the one this process imported: from a git
    # worktree, the environment's editable install would otherwise give them another checkout's code and bundle.
    import circuitwidgets

    under_test = str(Path(circuitwidgets.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([under_test, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env["PYTHONUNBUFFERED"] = "1"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


def _lab_settings(config_dir: Path) -> None:
    """No news, no update checks: nothing in the UI reaches the network or covers the page."""
    settings = config_dir / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


class JupyterServer:
    """A jupyter server with JupyterLab 4 (``/lab``) and Notebook 7 (``/notebooks``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.notebooks = root / "notebooks"
        self.notebooks.mkdir(parents=True, exist_ok=True)
        shutil.copy(HERE / "_widgets.py", self.notebooks / "_widgets.py")
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        env = _isolated_env(root)
        _lab_settings(Path(env["JUPYTER_CONFIG_DIR"]))
        argv = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            "--ServerApp.open_browser=False",
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={self.notebooks}",
            "--LabApp.news_url=",
            "--LabApp.extension_manager=readonly",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--ServerApp.shutdown_no_activity_timeout=1200",  # a leaked server ends on its own
            "--MappingKernelManager.cull_idle_timeout=1200",
        ]
        self.server = Server("jupyter", argv, root, env, f"{self.url}/api/status?token={self.token}")

    def write_notebook(self, name: str, cells: list[str] | None = None) -> str:
        """Write a notebook (one empty code cell unless ``cells``) and return its path relative to the root."""
        import nbformat

        nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
        nb.cells = [nbformat.v4.new_code_cell(src) for src in (cells or [""])]  # type: ignore[no-untyped-call]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nbformat.write(nb, self.notebooks / name)  # type: ignore[no-untyped-call]
        return name

    def start_kernel(self, path: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start the notebook's session and kernel through the REST API (as opening it would); return the kernel id.

        The server answers with the existing session when the notebook has one, so this never starts a second
        kernel for a notebook. Done before the page opens, so the front end joins a running session.
        """
        body = {"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}}
        return str(self.api("/api/sessions", "POST", body, timeout_s=timeout_s)["kernel"]["id"])

    def api(self, path: str, method: str = "GET", body: dict[str, Any] | None = None, timeout_s: float = 60) -> Any:
        """Call the server's REST API (``/api/...``) and return the decoded JSON answer (None when empty)."""
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = response.read()
        return json.loads(data) if data else None

    def session_kernel(self, path: str) -> dict[str, Any] | None:
        """The kernel model (id, execution_state, connections) of the notebook ``path``'s session, or None.

        The server keys sessions by path, so a notebook has at most one; a kernel started for it by the page
        (its "Select Kernel" answer) would replace this kernel, not add a session.
        """
        sessions = [s for s in self.api("/api/sessions") if s.get("path") == path]
        return dict(sessions[0]["kernel"]) if sessions and sessions[0].get("kernel") else None

    def lab_url(self, path: str) -> str:
        """JupyterLab on ``path`` in a workspace of its own.

        The default workspace is shared by every page of the server and reopens
        the notebooks an earlier test left open, whose hidden cells and other
        kernel the locators would then reach.
        """
        workspace = re.sub(r"[^A-Za-z0-9_-]", "-", path)
        return f"{self.url}/lab/workspaces/{workspace}/tree/{path}?token={self.token}"

    def notebook7_url(self, path: str) -> str:
        return f"{self.url}/notebooks/{path}?token={self.token}"


@contextmanager
def jupyter_server(root: Path) -> Iterator[JupyterServer]:
    """A running :class:`JupyterServer`; stopped on exit, whatever happens."""
    jupyter = JupyterServer(root)
    try:
        jupyter.server.start()
        yield jupyter
    finally:
        jupyter.server.stop()


# --- marimo -------------------------------------------------------------------------


class MarimoServer:
    """``marimo run app.py`` on 127.0.0.1 with a random port and access token."""

    def __init__(self, root: Path, app_source: str) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(HERE / "_widgets.py", root / "_widgets.py")
        self.app = root / "app.py"
        self.app.write_text(app_source)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/?access_token={self.token}"
        env = _isolated_env(root)
        env["MARIMO_SKIP_UPDATE_CHECK"] = "1"
        env["HOME"] = str(root)  # marimo keeps its config and state under ~
        argv = [
            str(Path(sys.executable).with_name("marimo")),
            "run",
            str(self.app),
            "--headless",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--token",
            "--token-password",
            self.token,
            "--no-sandbox",
            "--no-skew-protection",
        ]
        self.server = Server("marimo", argv, root, env, f"http://127.0.0.1:{self.port}/health")


@contextmanager
def marimo_server(root: Path, app_source: str) -> Iterator[MarimoServer]:
    """A running :class:`MarimoServer`; stopped on exit, whatever happens."""
    marimo = MarimoServer(root, app_source)
    try:
        marimo.server.start()
        yield marimo
    finally:
        marimo.server.stop()
