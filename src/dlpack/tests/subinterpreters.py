"""Subinterpreters for the suite and its corpus, the same on every Python it runs: the module
that makes them, one made in the first kind that can run a probe, and code run in one with its
error raised here (3.13's ``_interpreters.run_string`` returns the error; older versions raise
it, and a test that only catches would pass whatever happened)."""

from __future__ import annotations

import importlib
import importlib.util

MODULE = "_interpreters" if importlib.util.find_spec("_interpreters") else "_xxsubinterpreters"


def run(interpreters, interp, code: str) -> None:
    """Run code in interp; its error is raised here as a RuntimeError naming it."""
    failed = interpreters.run_string(interp, code)
    if failed is not None:
        raise RuntimeError(getattr(failed, "formatted", None) or repr(failed))


def create(probe: str = "import ctypes"):
    """(module, id) of a new subinterpreter of the first kind this Python makes in which probe
    runs (3.11 and 3.12 spell a shared-GIL one isolated=False, 3.13 "legacy"); the caller
    destroys it."""
    interpreters = importlib.import_module(MODULE)
    for config in ({}, {"isolated": False}, "legacy"):
        try:
            interp = (interpreters.create(**config) if isinstance(config, dict)
                      else interpreters.create(config))
        except (TypeError, ValueError):
            continue
        try:
            run(interpreters, interp, probe)
        except Exception:
            interpreters.destroy(interp)
            continue
        return interpreters, interp
    raise RuntimeError(f"no subinterpreter here can run {probe!r}")
