"""Every public name of every package is one object, however and whenever it is reached (issue 58).

A lazy package (``circuitwidgets``, ``circuitwidgets.features``) resolves its names on first use; a submodule with
a public name's own name would be bound over it by the import system the moment anything imported it, so
``cw.features.evaluate`` was the function once and the module after. Each check runs in a fresh interpreter, since
what is at stake is the order of first imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = r"""
import importlib, json, pkgutil, sys
import circuitwidgets

def packages():
    out = [circuitwidgets]
    for info in pkgutil.walk_packages(circuitwidgets.__path__, "circuitwidgets."):
        if info.ispkg:
            out.append(importlib.import_module(info.name))
    return out

def public(pkg):
    return [n for n in getattr(pkg, "__all__", []) if n != "__version__"]

def import_everything():
    failed = []
    for info in pkgutil.walk_packages(circuitwidgets.__path__, "circuitwidgets."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:  # an optional backend absent here: its module is not reachable either
            failed.append(f"{info.name}: {exc}")
    return failed

order = sys.argv[1]
pkgs = packages() if order == "names-first" else None
if order == "modules-first":
    skipped = import_everything()
    pkgs = packages()
seen, changed, clashes = {}, [], []
for pkg in pkgs:
    subs = {info.name for info in pkgutil.iter_modules(pkg.__path__)}
    for name in public(pkg):
        first, second = getattr(pkg, name), getattr(pkg, name)
        seen[(pkg.__name__, name)] = first
        if first is not second:
            changed.append(f"{pkg.__name__}.{name}: second access differs")
        if name in subs and type(first).__name__ == "module":
            clashes.append(f"{pkg.__name__}.{name} is its submodule")
if order == "names-first":
    skipped = import_everything()
for (pkg_name, name), value in seen.items():
    later = getattr(sys.modules[pkg_name], name)
    if later is not value:
        changed.append(f"{pkg_name}.{name}: {type(value).__name__} first, {type(later).__name__} after importing every submodule")
lazy = [p.__name__ for p in pkgs if "_LAZY" in vars(p)]
submodule_named = [f"{p.__name__}.{n}" for p in pkgs if "_LAZY" in vars(p) for n in p._LAZY
                   if n in {i.name for i in pkgutil.iter_modules(p.__path__)}]
print(json.dumps({"checked": len(seen), "changed": changed, "clashes": clashes, "lazy": lazy,
                  "submodule_named": submodule_named, "skipped": skipped}))
"""


def _probe(order: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, order], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_public_names_stay_the_same_object_after_every_submodule_is_imported() -> None:
    result = _probe("names-first")
    assert result["changed"] == [] and result["clashes"] == []
    assert {"circuitwidgets", "circuitwidgets.features"} <= set(result["lazy"])  # type: ignore[arg-type]
    assert int(result["checked"]) > 100  # type: ignore[call-overload]


def test_public_names_are_the_functions_even_when_their_modules_were_imported_first() -> None:
    result = _probe("modules-first")
    assert result["changed"] == [] and result["clashes"] == []
    # a lazy name that is also its package's submodule is bound over by that import: none may exist
    assert result["submodule_named"] == []


def test_evaluate_is_callable_on_every_use() -> None:
    import circuitwidgets as cw
    import circuitwidgets.features.evaluation  # the import that used to bind the module over the function

    assert callable(cw.features.evaluate) and callable(cw.features.evaluate)
    assert cw.features.evaluate.__module__ == "circuitwidgets.features.evaluation"
