"""The matrix's text and Markdown views, and the pieces every view shares (``matrix_html``
too): a cell's explanation, the reasons each said once with where they hold, the totals, and
what did not run. Pure functions of the JSON dict ``matrix.build`` returns."""

from __future__ import annotations

from dlpack.tools._cli import terminal_width
from dlpack.tools._cli import wrap as _wrap
from dlpack.tools.matrix_cases import LEGEND, PAIR_LEGEND, PAIR_SYMBOLS, STATUSES, SYMBOLS
from dlpack.tools.matrix_reasons import grouped_places

SHORT = {"numpy.asarray": "np.asarray", "tensorflow": "tf", "array_api_strict": "xp_strict",
         "memoryview": "memview", "torch.cuda": "torch.cuda"}


def _table(corner: str, labels: list[str], heads: list[str], rows: list[list[str]],
           width: int) -> list[str]:
    """Right-aligned columns under ``heads``, as many blocks of them as ``width`` needs (each
    block repeats the label column; a row empty in a block is left out of it)."""
    label = max(len(x) for x in [corner, *labels])
    cols = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    blocks: list[list[int]] = [[]]
    used = label
    for i, w in enumerate(cols):
        if blocks[-1] and used + 1 + w > width:
            blocks.append([])
            used = label
        blocks[-1].append(i)
        used += 1 + w
    out: list[str] = []
    for block in blocks:
        if out:
            out.append("")
        out.append(corner.ljust(label) + "".join(" " + heads[i].rjust(cols[i]) for i in block))
        out += [name.ljust(label) + "".join(" " + row[i].rjust(cols[i]) for i in block)
                for name, row in zip(labels, rows, strict=True) if any(row[i] for i in block)]
    return [line.rstrip() for line in out]


def _header_lines(h: dict, width: int) -> list[str]:
    """The header as text: versions first, wrapped to ``width``."""
    lines = _wrap(f"pydlpack {h['pydlpack']} · {h['implementation']} {h['python']} · "
                  f"{h['platform']} · device {h['device']}", width, "  ", "")
    if h["cuda"]:
        lines += _wrap(f"CUDA driver {h['cuda']['driver']} · GPU {', '.join(h['cuda']['gpus'])}",
                       width, "  ", "")
    libs = ", ".join(f"{k} {v}" for k, v in h["libraries"].items()) or "none"
    return lines + _wrap("libraries: " + libs, width, "  ", "")


def controlled(cell: dict) -> str:
    """What a failed cell's control without pydlpack showed, in words ("" for other cells)."""
    control = cell.get("control") or {}
    outcome = control.get("outcome")
    if cell["status"] == "unsupported":
        return f"without pydlpack too, {control['via']}: {control['reason']}"
    if outcome == "passed":
        return f"pydlpack's failure: without it, {control['via']} {control['reason']}"
    return f"no control: {control['reason']}" if outcome == "not_run" else ""


def bridge_failed(cell: dict) -> bool:
    """A failed cell whose control without pydlpack passes: pydlpack's own failure."""
    return cell["status"] == "fail" and (cell.get("control") or {}).get("outcome") == "passed"


def explained(cell: dict) -> str:
    """What a cell's footnote says: its reason, its note and its control ("" for a plain ok);
    pydlpack's own failure says so first."""
    parts = [cell["reason"], cell.get("note", ""), controlled(cell)]
    if bridge_failed(cell):
        parts.insert(0, parts.pop())
    return "; ".join(x for x in parts if x)


def reason_groups(result: dict, verbose: bool = False,
                  unsupported: bool = True) -> list[tuple[str, str, list[str]]]:
    """(status, explanation, [where]) for every cell with one, grouped by explanation, worst
    first (pydlpack's own failures first of all); where is said once by rows and columns
    (``grouped_places``), or pair by pair when ``verbose``. ``unsupported``: False leaves
    those cells out (``unsupported_lines`` says them in short)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for c in result["cells"]:
        text = explained(c)
        if text and (unsupported or c["status"] != "unsupported"):
            groups.setdefault((c["status"], text), []).append(c)
    order = {s: i for i, s in enumerate(reversed(STATUSES))}
    ranked = sorted(groups.items(), key=lambda g: (order[g[0][0]], not bridge_failed(g[1][0])))
    return [(status, text, _pair_by_pair(cells) if verbose else grouped_places(result, cells))
            for (status, text), cells in ranked]


def unsupported_lines(result: dict) -> list[str]:
    """The unsupported dtypes in short (one line, none without them), by the side that cannot
    take or export them, holders with the same dtypes named together."""
    order = {d: i for i, d in enumerate(result["dtypes"])}
    parts = []
    for side, verb in (("consumer", "take"), ("provider", "export")):
        held: dict[str, set[str]] = {}
        for c in result["cells"]:
            if c["status"] == "unsupported" and c["control"]["side"] == side:
                held.setdefault(c[side], set()).add(c["dtype"])
        names: dict[tuple[str, ...], list[str]] = {}
        for name, dtypes in held.items():
            names.setdefault(tuple(sorted(dtypes, key=order.__getitem__)), []).append(name)
        if names:
            parts.append(f"{side}s that cannot {verb} them: "
                         + "; ".join(f"{', '.join(n)} ({', '.join(d)})" for d, n in names.items()))
    if not parts:
        return []
    return [f"{SYMBOLS['unsupported']} unsupported, shown by a control without pydlpack (its "
            "error: --verbose, --json, --html) — " + " — ".join(parts)]


def _pair_by_pair(cells: list[dict]) -> list[str]:
    """"provider → consumer (dtypes)" for each pair of ``cells``, in their order."""
    where: dict[str, list[str]] = {}
    for c in cells:
        where.setdefault(f"{c['provider']} → {c['consumer']}", []).append(c["dtype"])
    return [f"{pair} ({', '.join(ds)})" for pair, ds in where.items()]


def unavailable_lines(result: dict) -> list[str]:
    """One line per reason: which providers and consumers did not run, and why."""
    groups: dict[str, dict[str, list[str]]] = {}
    for u in result["unavailable"]:
        groups.setdefault(u["reason"], {}).setdefault(u["role"] + "s", []).append(u["name"])
    out = []
    for reason, who in groups.items():
        names = "; ".join(role + " " + ", ".join(n) for role, n in who.items())
        out.append(f"not run: {names} — {reason}")
    return out


def not_run_lines(result: dict) -> list[str]:
    """One line per missing library: the cells it would run, by provider and dtypes."""
    groups: dict[str, dict[tuple[str, tuple[str, ...]], list[str]]] = {}
    by_pair: dict[tuple[str, str, str], list[str]] = {}
    for x in result.get("not_run", []):
        by_pair.setdefault((x["library"], x["provider"], x["consumer"]), []).append(x["dtype"])
    for (library, p, c), names in by_pair.items():
        groups.setdefault(library, {}).setdefault((p, tuple(names)), []).append(c)
    out = []
    for library, where in groups.items():
        count = sum(len(ds) * len(cs) for (_, ds), cs in where.items())
        parts: list[str] = []
        for (p, ds), cs in where.items():
            whom = "every consumer" if cs == result["consumers"] else \
                ", ".join(SHORT.get(c, c) for c in cs)
            parts.append(f"{p} → {whom} ({', '.join(ds)})")
        out.append(f"not run: {count} cells, which need {library} (not installed; "
                   f"pip install {library} runs them) — {'; '.join(parts)}")
    return out


def totals(result: dict) -> str:
    """How many cells ended in each status, and how many failures are pydlpack's own."""
    counts = {s: sum(c["status"] == s for c in result["cells"]) for s in STATUSES}
    own = sum(map(bridge_failed, result["cells"]))
    mine = f" ({own} of them pydlpack's own: a control without it passes)" if own else ""
    return ", ".join(f"{counts[s]} {SYMBOLS[s]} {s}" + (mine if s == "fail" else "")
                     for s in STATUSES)


def _summary_rows(result: dict) -> tuple[list[str], list[str], list[list[str]]]:
    """Provider labels 'name (dtypes it makes)', short consumer heads, cells 'verdict worked'."""
    pairs = {(x["provider"], x["consumer"]): x for x in result["pairs"]}
    labels, rows = [], []
    for p in result["providers"]:
        row, made = [], 0
        for c in result["consumers"]:
            x = pairs.get((p, c))
            if x is None:
                row.append("")
                continue
            n = x["counts"]
            made = x["dtypes"]
            worked = n["ok"] + n["copy"] + n["readonly_ignored"]
            held = f"/{x['held']}" if n["unsupported"] else ""
            row.append(f"{PAIR_SYMBOLS[x['verdict']]} {worked}{held}")
        labels.append(f"{p} ({made})")
        rows.append(row)
    return labels, [SHORT.get(c, c) for c in result["consumers"]], rows


def _grid_rows(result: dict) -> tuple[list[str], list[str], list[list[str]], dict[str, int]]:
    """Labels 'provider → consumer', the dtypes that have a cell, marks, numbered footnotes."""
    cells = {(c["provider"], c["consumer"], c["dtype"]): c for c in result["cells"]}
    dtypes = [d for d in result["dtypes"] if any(c["dtype"] == d for c in result["cells"])]
    notes: dict[str, int] = {}
    labels, rows = [], []
    for p in result["providers"]:
        for c in result["consumers"]:
            row = []
            for d in dtypes:
                cell = cells.get((p, c, d))
                if cell is None:
                    row.append("")
                    continue
                mark = SYMBOLS[cell["status"]]
                text = explained(cell)
                if text and cell["status"] != "unsupported":
                    mark += str(notes.setdefault(text, len(notes) + 1))
                row.append(mark)
            if any(row):
                labels.append(f"{p} → {SHORT.get(c, c)}")
                rows.append(row)
    return labels, dtypes, rows, notes


def _short_names(result: dict) -> str:
    short = [f"{v} = {k}" for k, v in SHORT.items() if k in result["consumers"] and k != v]
    return "(" + ", ".join(short) + ")" if short else ""


SUMMARY_LEGEND = ("; n = dtypes that worked, (m) = dtypes the provider makes; n/m: m = "
                  "dtypes both sides hold, where one side cannot hold some (– unsupported, "
                  "below); --grid shows each dtype")


def render_text(result: dict, grid: bool = False, width: int | None = None,
                verbose: bool = False) -> str:
    """The terminal view: header, summary (or the per-dtype grid), footnotes, what did not run;
    every line fits ``width`` (the terminal's) unless one word is longer. Each reason is said
    once with where it holds by rows and columns; ``verbose``: pair by pair."""
    width = width or terminal_width()
    out = [*_header_lines(result["header"], width), ""]
    if grid:
        labels, dtypes, rows, notes = _grid_rows(result)
        out += _wrap("   ".join(f"{SYMBOLS[s]} {LEGEND[s]}" for s in STATUSES), width)
        out += ["", *_table("provider → consumer", labels, dtypes, rows, width)]
        out += _wrap(_short_names(result), width) if _short_names(result) else []
        out += ["", *_wrap(totals(result), width), ""]
        for text, n in notes.items():
            out += _wrap(text, width, "      ", f"{n:>4}. ")
        for line in unsupported_lines(result):
            out += _wrap(line, width, "    ")
    else:
        labels, heads, rows = _summary_rows(result)
        out += _wrap(" · ".join(f"{PAIR_SYMBOLS[k]} {v}" for k, v in PAIR_LEGEND.items())
                     + SUMMARY_LEGEND, width)
        out += ["", *_table("provider (m)", labels, heads, rows, width)]
        out += _wrap(_short_names(result), width) if _short_names(result) else []
        out += ["", *_wrap(totals(result), width), ""]
        for status, text, where in reason_groups(result, verbose, verbose):
            out += _wrap(f"{SYMBOLS[status]} {text}", width, "    ")
            out += _wrap("in: " + "; ".join(where), width, "      ", "    ")
        for line in ([] if verbose else unsupported_lines(result)):
            out += _wrap(line, width, "    ")
    if result["unavailable"] or result.get("not_run"):
        out.append("")
        for line in unavailable_lines(result) + not_run_lines(result):
            out += _wrap(line, width, "    ")
    return "\n".join(line.rstrip() for line in out)


def render_markdown(result: dict, grid: bool = False, verbose: bool = False) -> str:
    """The same as render_text as Markdown: tables, and the footnotes as a numbered list."""
    h = result["header"]
    out = [f"### pydlpack {h['pydlpack']} interoperability matrix ({h['device']})", "",
           f"{h['implementation']} {h['python']} · {h['platform']}"
           + (f" · CUDA driver {h['cuda']['driver']} · {', '.join(h['cuda']['gpus'])}"
              if h["cuda"] else ""), "",
           "Libraries: " + (", ".join(f"{k} {v}" for k, v in h["libraries"].items()) or "none"),
           ""]
    if grid:
        labels, dtypes, rows, notes = _grid_rows(result)
        out += [" · ".join(f"{SYMBOLS[s]} {LEGEND[s]}" for s in STATUSES), "",
                "| provider → consumer | " + " | ".join(dtypes) + " |",
                "|---|" + "---|" * len(dtypes)]
        out += ["| " + label + " | " + " | ".join(row) + " |"
                for label, row in zip(labels, rows, strict=True)]
        out += ["", _short_names(result), "", totals(result), ""]
        out += [f"{n}. {text.replace('|', '/')}" for text, n in notes.items()]
        out += [f"- {line}" for line in unsupported_lines(result)]
    else:
        labels, heads, rows = _summary_rows(result)
        out += [" · ".join(f"{PAIR_SYMBOLS[k]} {v}" for k, v in PAIR_LEGEND.items())
                + SUMMARY_LEGEND, "",
                "| provider (m) ↓ consumer → | " + " | ".join(heads) + " |",
                "|---|" + "---|" * len(heads)]
        out += ["| " + label + " | " + " | ".join(row) + " |"
                for label, row in zip(labels, rows, strict=True)]
        out += ["", _short_names(result), "", totals(result), ""]
        for n, (status, text, where) in enumerate(reason_groups(result, verbose, verbose), 1):
            out.append(f"{n}. {SYMBOLS[status]} {text.replace('|', '/')} — in: "
                       + "; ".join(where))
        out += [f"- {line}" for line in ([] if verbose else unsupported_lines(result))]
    if result["unavailable"] or result.get("not_run"):
        out += ["", *[f"- {line}" for line in unavailable_lines(result) + not_run_lines(result)]]
    return "\n".join(line.rstrip() for line in out) + "\n"
