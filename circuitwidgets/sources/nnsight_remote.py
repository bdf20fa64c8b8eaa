"""Remote nnsight traces that end: a deadline on every wait, every failure a :class:`RemoteRunError` naming the host.

nnsight's own remote backend waits on its ``/subscribe`` websocket with no
timeout, so a server that accepts and never answers, or a job that never
completes, holds the caller forever; a refused port, a garbage reply or an
offline hub look-up surface as whatever the transport raised. :class:`DeadlineBackend`
is nnsight's backend with one deadline for the whole exchange (connect,
session, request, status stream, result) and with every failure turned into a
:class:`~circuitwidgets.errors.RemoteRunError` that names the host and the
cause. :func:`model_key` names the model for the server without a hub look-up
for a model built in memory (which NDIF could not run anyway).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from circuitwidgets.errors import ArgumentError, CircuitWidgetsError, RemoteRunError

#: Seconds one remote trace may take from connecting to its result, unless ``from_nnsight(..., timeout=)`` says.
DEFAULT_REMOTE_TIMEOUT = 600.0

_T = TypeVar("_T")


def check_timeout(timeout: object) -> float:
    """``timeout`` checked: a positive, finite number of seconds."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ArgumentError(f"timeout: expected a positive number of seconds, got {timeout!r}")
    return float(timeout)


def check_host(host: object) -> str | None:
    """``host`` checked: ``None`` (nnsight's configured NDIF host) or an ``http(s)://`` URL."""
    if host is None:
        return None
    if not isinstance(host, str) or not host.startswith(("http://", "https://")):
        raise ArgumentError(f"host: expected None or a URL starting with http:// or https://, got {host!r}")
    return host.rstrip("/")


def model_key(lm: Any, host: str) -> str:
    """The key the server knows ``lm`` by; a model built in memory is refused before any hub look-up."""
    repo = getattr(lm, "repo_id", "")
    if not isinstance(repo, str) or not repo:
        raise RemoteRunError(
            f"{host}: a remote trace names its model by its hub id, and this model was built in memory (it has none); "
            "load it by name, nnsight.LanguageModel('org/name'), to run it remotely, or pass remote=False"
        )
    try:
        return str(lm.to_model_key())
    except CircuitWidgetsError:
        raise
    except Exception as error:  # huggingface_hub/httpx errors of an offline or unreachable hub
        raise RemoteRunError(
            f"{host}: looking up the model {repo!r} on the Hugging Face hub (to name it for the server) failed: "
            f"{_cause(error)}"
        ) from error


def _cause(error: BaseException) -> str:
    """An exception in words: its type and message (or ``repr`` when it has none)."""
    text = str(error) or repr(error)
    return f"{type(error).__name__}: {text}"[:500]


def backend(lm: Any, host: str | None, timeout: float) -> Any:
    """A :class:`DeadlineBackend` for one trace of ``lm`` (nnsight's host when ``host`` is ``None``)."""
    from nnsight.schema.config import CONFIG

    where = host or str(CONFIG.API.HOST)
    return _backend_class()(model_key(lm, where), where, timeout, lm._remoteable_get_env())


_CLASS: list[type] = []


def _backend_class() -> type:
    """:class:`DeadlineBackend`, defined on first use (nnsight is an optional extra)."""
    if _CLASS:
        return _CLASS[0]
    from nnsight.intervention.backends.remote import RemoteBackend, RemoteError
    from nnsight.schema.response import Status

    class DeadlineBackend(RemoteBackend):  # type: ignore[misc]
        """nnsight's blocking remote backend with a deadline on every wait and typed failures."""

        def __init__(self, key: str, host: str, timeout: float, env: dict[str, Any]) -> None:
            super().__init__(key, host=host, env=env)
            self.timeout = timeout

        def __call__(self, tracer: Any = None) -> Any:
            try:
                return super().__call__(tracer)
            except CircuitWidgetsError:
                raise
            except RemoteError as error:
                raise RemoteRunError(f"{self.host}: the server reported an error: {error}") from error
            except Exception as error:  # refused, reset, timed out, garbage (JSON, pydantic), TLS …
                raise RemoteRunError(f"{self.host}: the remote trace failed: {_cause(error)}") from error

        def _expired(self, waiting: str) -> RemoteRunError:
            return RemoteRunError(
                f"{self.host}: no answer within timeout={self.timeout:g} s while {waiting}; the server may be "
                "down or the job queued: raise from_nnsight(..., timeout=) to wait longer"
            )

        def _left(self, deadline: float, waiting: str) -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._expired(waiting)
            return left

        def _bounded(self, fn: Callable[[], _T], deadline: float, waiting: str) -> _T:
            """``fn()`` (an HTTP exchange whose own read timeout is nnsight's 600 s) cut off at the deadline."""
            box: dict[str, Any] = {}

            def work() -> None:
                try:
                    box["value"] = fn()
                except BaseException as error:  # handed to the waiting thread
                    box["error"] = error

            worker = threading.Thread(target=work, name="circuitwidgets-remote-http", daemon=True)
            worker.start()
            worker.join(self._left(deadline, waiting))
            if worker.is_alive():  # it ends by itself when the server answers, closes, or nnsight's timeout fires
                raise self._expired(waiting)
            if "error" in box:
                raise box["error"]
            return box["value"]  # type: ignore[no-any-return]

        def request(self, request: Any, tracer: Any) -> Any:
            import websocket

            blob = self._serialize(tracer)  # local work: the deadline bounds the waits on the server
            deadline = time.monotonic() + self.timeout
            header = {"ndif-api-key": self.api_key} if self.api_key else None
            try:
                connection = websocket.create_connection(
                    f"{self.ws_host}/subscribe", timeout=self._left(deadline, "connecting"), header=header
                )
            except websocket.WebSocketTimeoutException as error:
                raise self._expired("connecting") from error
            try:
                request.session_id = json.loads(self._receive(connection, deadline, "opening a session"))["session_id"]
                self._bounded(lambda: self.send(request, blob), deadline, "sending the request")
                while True:
                    response = self.parse(self._receive(connection, deadline, "waiting for the job"))
                    result = self._bounded(partial(self.handle, response), deadline, "fetching the result")
                    if response.status == Status.COMPLETED:
                        return result
            finally:
                connection.close()

        def _receive(self, connection: Any, deadline: float, waiting: str) -> Any:
            import websocket

            connection.settimeout(self._left(deadline, waiting))
            try:
                return connection.recv()
            except websocket.WebSocketTimeoutException as error:
                raise self._expired(waiting) from error

    _CLASS.append(DeadlineBackend)
    return DeadlineBackend


__all__ = ["DEFAULT_REMOTE_TIMEOUT", "backend", "check_host", "check_timeout", "model_key"]
