"""``python -m dlpack``: the interoperability matrix, every installed provider × consumer ×
dtype through ``asdlpack`` (docs/spec.md §9; the JSON schema is in docs/matrix.md).

``build`` runs the cells (``matrix_cases``) under the environment's header (``matrix_env``) and
grades each provider × consumer pair by its worst cell; ``main`` is the command line, whose
views are ``matrix_text`` (text, Markdown) and ``matrix_html`` (``--html``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict

import dlpack
from dlpack.tools._cli import EXIT_USAGE, JsonArgumentParser, quiet_native_stderr, terminal_width
from dlpack.tools._cli import wrap as _wrap
from dlpack.tools.matrix_cases import (
    CONSUMERS,
    DTYPES,
    LEGEND,
    PAIR_LEGEND,
    PAIR_SYMBOLS,
    PROVIDERS,
    STATUSES,
    SYMBOLS,
    Cell,
    NotApplicable,
    alignment_need,
    available,
    reason_of,
    run_cell,
)
from dlpack.tools.matrix_control import Controls
from dlpack.tools.matrix_env import NoCuda, cuda_info, header
from dlpack.tools.matrix_html import render_html
from dlpack.tools.matrix_text import (
    not_run_lines,
    render_markdown,
    render_text,
    unavailable_lines,
)

SCHEMA = "pydlpack-matrix/1"
EXIT_NO_DEVICE = 3


# -- running and grading -------------------------------------------------------------------------

def _pair_verdict(counts: dict[str, int]) -> str:
    """The worst thing that happened between two libraries, for the summary; dtypes one side
    cannot hold (``unsupported``) do not count against the pair."""
    if counts["unsupported"] == sum(counts.values()):
        return "unsupported"
    for status in ("wrong", "readonly_ignored", "unverified"):
        if counts[status]:
            return status
    if counts["fail"]:
        return "some" if counts["ok"] + counts["copy"] else "none"
    return "copy" if counts["copy"] else "ok"


def _pairs(cells: list[Cell], providers: list[str], consumers: list[str]) -> list[dict]:
    """Per provider × consumer: how many dtypes ended in each status, the verdict, and how
    many dtypes both sides hold (``held``: those not ``unsupported``)."""
    out = []
    for p in providers:
        for c in consumers:
            mine = [x for x in cells if x.provider == p and x.consumer == c]
            if not mine:
                continue
            counts = {s: sum(x.status == s for x in mine) for s in STATUSES}
            out.append({"provider": p, "consumer": c, "verdict": _pair_verdict(counts),
                        "dtypes": len(mine), "held": len(mine) - counts["unsupported"],
                        "counts": counts})
    return out


def build(providers=None, consumers=None, dtypes=None, device="cpu", progress=None,
          cuda: dict | None = None) -> dict:
    """Run the matrix; returns the JSON-ready result (schema in docs/matrix.md)."""
    with quiet_native_stderr():
        return _build(providers, consumers, dtypes, device, progress, cuda)


def _build(providers, consumers, dtypes, device, progress, cuda) -> dict:
    p_names, p_missing = available(PROVIDERS, providers, device)
    c_names, c_missing = available(CONSUMERS, consumers, device)
    names = [d for d in DTYPES if dtypes is None or d in dtypes]
    todo = [(p, c, d) for p in p_names for c in c_names for d in names]
    needs = {c: alignment_need(c) if device == "cpu" and todo else None for c in c_names}
    cells, not_run = [], []
    controls = Controls()
    for i, (p, c, d) in enumerate(todo):
        if progress:
            progress(i, len(todo), p, c, d)
        cell = run_cell(p, c, d, needs[c])
        if cell is not None and cell.status == "not_run":
            not_run.append({"provider": p, "consumer": c, "dtype": d, "library": cell.reason})
        elif cell is not None:
            cells.append(controls.judge(cell))
    if progress:
        progress(len(todo), len(todo), "", "", "")
    wrong = any(c.status == "wrong" for c in cells)
    return {
        "schema": SCHEMA,
        "header": header(device, cuda),
        "providers": p_names,
        "consumers": c_names,
        "dtypes": names,
        "unavailable": [{"role": "provider", "name": k, "reason": v} for k, v in p_missing.items()]
        + [{"role": "consumer", "name": k, "reason": v} for k, v in c_missing.items()],
        "pairs": _pairs(cells, p_names, c_names),
        "cells": [asdict(c) for c in cells],
        "not_run": not_run,
        "exit_status": 1 if wrong else 0,
    }


# -- the command line ----------------------------------------------------------------------------

def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _names(table: dict, device: str | None = None) -> str:
    return ", ".join(n for n, entry in table.items() if device is None or entry[2] == device)


def _epilog(width: int) -> str:
    """--help's list of names, statuses and exit statuses, wrapped to ``width``."""
    out: list[str] = []
    for title, table in (("providers", PROVIDERS), ("consumers", CONSUMERS)):
        out += _wrap(f"{title}: {_names(table, 'cpu')}; with --device cuda: "
                     f"{_names(table, 'cuda')}", width, "    ", "")
    out += _wrap("dtypes: " + ", ".join(DTYPES), width, "    ", "")
    out += ["", "cells (--grid; --json's \"status\"):"]
    for s in STATUSES:
        out += _wrap(LEGEND[s], width, " " * 22, f"  {SYMBOLS[s]:<2} {s:<16} ")
    out += ["", "summary, a provider × consumer pair's worst cell:"]
    for k, v in PAIR_LEGEND.items():
        out += _wrap(v, width, " " * 22, f"  {PAIR_SYMBOLS[k]:<2} {k:<16} ")
    out += [""]
    out += _wrap("exit status: 0 ran, no wrong values; 1 a cell has wrong values, or the run "
                 "failed; 2 usage error, or the filters select nothing that can run here (the "
                 "names that can are listed); 3 the --device asked for is not here", width,
                 "    ", "")
    out += ["", "python -m dlpack check MODULE:FACTORY [...] [--json]",
            "python -m dlpack check --consumer MODULE:CALLABLE [...] [--json]"]
    out += _wrap("grade a library's DLPack producer (FACTORY() returns an array), or its "
                 "from_dlpack (CALLABLE), rule by rule (python -m dlpack check --help); every "
                 "library's results: docs/check.md", width, "    ", "    ")
    return "\n".join(out)


def _runnable(device: str, providers: list[str] | None, dtypes: list[str] | None) -> str:
    """The names that can run here, for the error of filters that select nothing."""
    p_here, _ = available(PROVIDERS, None, device)
    c_here, _ = available(CONSUMERS, None, device)
    made = []
    for p in providers or p_here:
        if p in p_here:
            with quiet_native_stderr():
                kinds = []
                for d in DTYPES:
                    try:
                        PROVIDERS[p][1](d)
                    except (NotApplicable, ModuleNotFoundError):
                        continue
                    except Exception:
                        pass
                    kinds.append(d)
            made.append(f"{p}: {', '.join(kinds)}")
    lines = [f"providers here: {', '.join(p_here) or 'none'}",
             f"consumers here: {', '.join(c_here) or 'none'}"]
    if made and (providers or dtypes):
        lines.append("dtypes the " + ("selected " if providers else "") + "providers make — "
                     + "; ".join(made))
    return "\n".join(lines)


def _empty(device: str, cuda: dict | None, error: str, status: int) -> dict:
    """A result in the JSON schema for a run that could not start, with the reason."""
    return {"schema": SCHEMA, "header": header(device, cuda), "providers": [], "consumers": [],
            "dtypes": [], "unavailable": [], "pairs": [], "cells": [], "not_run": [],
            "error": error,
            "exit_status": status}


def main(argv: list[str] | None = None) -> int:
    """``python -m dlpack``: exit status 1 when a cell has wrong values or the run failed, 2 on
    usage errors and filters that select nothing, 3 when the device asked for is not here."""
    width = terminal_width()
    parser = JsonArgumentParser(
        SCHEMA, "Which installed library can hand which dtype to which other library, "
        "zero-copy, through pydlpack's asdlpack(). `python -m dlpack check MODULE:FACTORY` "
        "grades a producer's DLPack implementation instead, `python -m dlpack check --consumer "
        "MODULE:CALLABLE` a consumer's (docs/check.md).", width,
        prog="python -m dlpack", epilog=_epilog(width))
    parser.add_argument("--version", action="version", version=f"pydlpack {dlpack.__version__}")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true",
                      help="machine-readable output (schema in docs/matrix.md); always JSON, "
                           "errors included")
    form.add_argument("--markdown", action="store_true", help="Markdown tables, for docs")
    parser.add_argument("--html", metavar="FILE",
                        help="write one self-contained page (the same data as --json) to "
                             "FILE; - for standard output")
    parser.add_argument("--grid", action="store_true",
                        help="one column per dtype instead of the provider × consumer summary")
    parser.add_argument("--verbose", action="store_true",
                        help="list each reason's cells pair by pair, not by rows and columns")
    parser.add_argument("--dtype", action="append", help="only these dtypes (comma-separated)")
    parser.add_argument("--provider", action="append", help="only these providers")
    parser.add_argument("--consumer", action="append", help="only these consumers")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: exchange GPU arrays (CuPy, Numba, PyTorch CUDA); exit "
                             "status 3 where there is no GPU")
    args = parser.parse_args(argv)
    for flag, allowed in (("dtype", DTYPES), ("provider", PROVIDERS), ("consumer", CONSUMERS)):
        given = getattr(args, flag)
        if given and not _split(given):         # "--dtype ,": a filter that names nothing
            parser.error(f"--{flag} {','.join(given)!r} names no {flag}; "
                         f"choose from {', '.join(allowed)}")
        unknown = set(_split(given) or ()) - set(allowed)
        if unknown:
            parser.error(f"unknown --{flag} {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(allowed)}")
    if args.html == "":
        parser.error("--html '': name the page's FILE, or - for standard output")
    if args.html and (args.json or args.markdown):
        parser.error(f"argument --html: not allowed with argument "
                     f"{'--json' if args.json else '--markdown'}")
    if args.html and args.html != "-" and _unwritable(args.html):
        parser.error(f"--html {args.html!r}: cannot write the page: {_unwritable(args.html)}")
    cuda = None
    if args.device == "cuda":
        try:
            cuda = cuda_info()
        except NoCuda as e:
            error = f"--device cuda: no CUDA device here ({e}); nothing was run"
            if args.json:
                print(json.dumps(_empty("cuda", None, error, EXIT_NO_DEVICE), indent=1,
                                 ensure_ascii=False))
            print("\n".join(_wrap(f"python -m dlpack: {error}", width, "  ", "")),
                  file=sys.stderr)
            return EXIT_NO_DEVICE
    progress = None
    if sys.stderr.isatty() and not args.json:
        start = time.monotonic()

        def progress(i, n, p, c, d):
            end = "\n" if i == n else ""
            line = f"[{i}/{n}] {time.monotonic() - start:4.1f}s {p} → {c} {d}"
            sys.stderr.write(f"\r\x1b[K{line[:width - 1]}{end}")
            sys.stderr.flush()

    try:
        result = build(_split(args.provider), _split(args.consumer), _split(args.dtype),
                       args.device, progress, cuda)
    except Exception as e:
        error = f"the matrix run itself failed: {reason_of(e)}"
        if args.json:
            print(json.dumps(_empty(args.device, cuda, error, 1), indent=1, ensure_ascii=False))
        print("\n".join(_wrap(f"python -m dlpack: {error}", width, "  ", "")), file=sys.stderr)
        return 1
    if not result["cells"]:
        filtered = args.provider or args.consumer or args.dtype
        error = "the filters select nothing that can run here" if filtered else \
            f"nothing installed can run with --device {args.device}"
        names = _runnable(args.device, _split(args.provider), _split(args.dtype))
        result["error"] = f"{error}. " + names.replace("\n", ". ")
        result["exit_status"] = EXIT_USAGE
        if args.json:
            print(json.dumps(result, indent=1, ensure_ascii=False))
        print("\n".join(_wrap(f"python -m dlpack: {error}", width, "  ", "")), file=sys.stderr)
        for line in [*names.splitlines(), *unavailable_lines(result), *not_run_lines(result)]:
            print("\n".join(_wrap(line, width, "    ", "  ")), file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(result, indent=1, ensure_ascii=False))
    elif args.html:
        return _write_html(result, args.html, width)
    elif args.markdown:
        print(render_markdown(result, args.grid, args.verbose))
    else:
        print(render_text(result, args.grid, width, args.verbose))
    return result["exit_status"]


def _unwritable(path: str) -> str:
    """Why no file can be written at ``path`` ("" when one can), checked before the run."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "it is a folder; name a file"
    if not os.path.isdir(folder):
        return f"its folder {folder} does not exist"
    if os.path.exists(path):
        return "" if os.access(path, os.W_OK) else "it exists and is not writable"
    return "" if os.access(folder, os.W_OK) else f"its folder {folder} is not writable"


def _write_html(result: dict, path: str, width: int) -> int:
    """--html: the page to ``path`` (``-``: standard output); the run's exit status, or 2 (a
    FILE that cannot take the page, as the check before the run says) when writing fails there
    — a full disk, ``/dev/full`` — which no check short of writing can foresee."""
    page = render_html(result)
    if path == "-":
        sys.stdout.write(page)
        return result["exit_status"]
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        print("\n".join(_wrap(f"python -m dlpack: --html {path!r}: cannot write the page: "
                               f"{reason_of(e)}; the run's results are not saved", width, "  ",
                               "")), file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(_wrap(f"python -m dlpack: wrote {path} ({len(result['cells'])} cells)",
                          width, "  ", "")), file=sys.stderr)
    return result["exit_status"]
