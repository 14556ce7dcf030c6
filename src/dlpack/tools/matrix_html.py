"""The interoperability matrix as one self-contained HTML page (``python -m dlpack --html``).

A view of the JSON dict ``matrix.build`` returns (``--json`` prints the same dict), so the page
and the JSON never disagree: the header, one providers × consumers grid whose cells open
(``<details>``, no JavaScript) to each dtype's status and reason, the reasons said once, and
what did not run. No network, scripts, fonts or other files: it opens from disk, prints, and
fits a phone's width (the grid scrolls sideways). Each status has a mark beside its colour, so
it reads in greyscale and for colour-blind readers (docs/spec.md §9).
"""

from __future__ import annotations

from html import escape

from dlpack.tools.matrix_cases import LEGEND, PAIR_LEGEND, PAIR_SYMBOLS, STATUSES, SYMBOLS
from dlpack.tools.matrix_text import (
    explained,
    not_run_lines,
    reason_groups,
    totals,
    unavailable_lines,
)

# Okabe-Ito hues, lightened, for the verdicts and the cell statuses (which share a class where
# they mean the same: a ✗ dtype is coloured as a pair where every dtype fails); in greyscale
# they darken from ok to wrong, and every status has its mark besides.
_CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111;
       background: #fff; margin: 0 auto; max-width: 80rem; padding: 0 .6rem 2rem; }
h1 { font-size: 1.3rem; margin: .8rem 0 .3rem; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 .4rem; }
p, ul, ol { margin: .3rem 0; }
.meta { color: #333; overflow-wrap: anywhere; }
.mark { display: inline-block; min-width: 1.3em; font-weight: 700; text-align: center; }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .25rem .9rem; }
.legend li { overflow-wrap: anywhere; }
.legend .mark, .reasons .mark { border: 1px solid #777; border-radius: .2rem; padding: 0 .15rem; }
.scroll { overflow-x: auto; max-width: 100%; }
table.grid { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.grid th, .grid td { border: 1px solid #888; padding: .15rem .3rem; vertical-align: top; }
.grid thead th { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap;
                 text-align: left; font-weight: 600; padding: .3rem .15rem; }
.grid thead th.corner { writing-mode: horizontal-tb; transform: none; vertical-align: bottom;
                        white-space: normal; font-weight: 400; }
.grid tbody th { position: sticky; left: 0; background: #fff; text-align: left;
                 font-weight: 600; box-shadow: inset -1px 0 #888; }
.grid td { white-space: nowrap; }
.grid td details[open] { white-space: normal; min-width: 18rem; max-width: 28rem; }
summary { cursor: pointer; list-style: none; }
summary::-webkit-details-marker { display: none; }
summary .n { text-decoration: underline dotted; }
.cell { list-style: none; padding: 0; margin: .3rem 0 0; font-size: .9rem; }
.cell li { margin: .15rem 0; padding: .1rem .2rem; overflow-wrap: anywhere; }
.dtypes { font-weight: 600; }
.reasons li { margin: .35rem 0; overflow-wrap: anywhere; }
.where { color: #333; }
.v-ok { background: #e6f5ee; } .v-copy { background: #cfe6f7; } .v-some { background: #f0dc6e; }
.v-unverified { background: #c8c8c8; } .v-none { background: #eea27e; }
.v-readonly_ignored { background: #d58fbd; } .v-wrong { background: #5c0a1e; color: #fff; }
.v-unsupported { background: #f2f2f2; color: #444; } .u { color: #555; font-size: .85em; }
.error { border: 2px solid #5c0a1e; padding: .3rem .5rem; }
footer { margin-top: 1.5rem; color: #444; font-size: .9rem; }
@media (max-width: 40rem) { .grid { font-size: .85rem; } }
@media print {
  @page { size: landscape; margin: 1cm; }
  body { font-size: 9pt; max-width: none; padding: 0; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  .scroll { overflow: visible; }
  .grid tbody th { position: static; }
  .reasons li, .grid tr { break-inside: avoid; }
}
"""

# A cell status's colour: the verdict class that means the same for a whole pair.
_STATUS_CLASS = {"ok": "ok", "copy": "copy", "readonly_ignored": "readonly_ignored",
                 "unsupported": "unsupported", "fail": "none", "unverified": "unverified",
                 "wrong": "wrong"}


def _mark(symbol: str) -> str:
    return f'<span class="mark">{escape(symbol)}</span>'


def _header(h: dict) -> list[str]:
    title = f"pydlpack {h['pydlpack']} interoperability matrix ({h['device']})"
    out = [f"<header><h1>{escape(title)}</h1>",
           f'<p class="meta">{escape(h["implementation"])} {escape(h["python"])} · '
           f'{escape(h["platform"])} · {escape(h["machine"])}</p>']
    if h["cuda"]:
        gpus = ", ".join(h["cuda"]["gpus"])
        out.append(f'<p class="meta">CUDA driver {escape(h["cuda"]["driver"])} · GPU '
                   f"{escape(gpus)}</p>")
    libs = ", ".join(f"{k} {v}" for k, v in h["libraries"].items()) or "none"
    out.append(f'<p class="meta">Libraries: {escape(libs)}</p></header>')
    return out


def _legend() -> list[str]:
    out = ['<section id="legend"><h2>Legend</h2>',
           "<p>A cell is a provider × consumer pair: its worst status, then how many of the "
           "dtypes both sides hold worked (n/m), and how many dtypes one side cannot hold "
           "(– unsupported, proved by a control without pydlpack), which do not count against "
           "the pair. Open it for each dtype and why.</p>",
           '<ul class="legend">']
    out += [f'<li><span class="v-{k}">{_mark(PAIR_SYMBOLS[k])}</span> {escape(v)}</li>'
            for k, v in PAIR_LEGEND.items()]
    out += ["</ul>", "<p>Each dtype in an opened cell:</p>", '<ul class="legend">']
    out += [f'<li><span class="v-{_STATUS_CLASS[s]}">{_mark(SYMBOLS[s])}</span> '
            f'{escape(s)}: {escape(LEGEND[s].split(" — ")[0])}</li>' for s in STATUSES]
    return [*out, "</ul></section>"]


def _cell(pair: dict, cells: list[dict]) -> str:
    """One grid cell: verdict and n/m, opening to its dtypes grouped by status and reason."""
    groups: dict[tuple[str, str], list[str]] = {}
    for c in cells:
        groups.setdefault((c["status"], explained(c)), []).append(c["dtype"])
    order = {s: i for i, s in enumerate(reversed(STATUSES))}
    items = []
    for (status, why), dtypes in sorted(groups.items(), key=lambda g: order[g[0][0]]):
        text = f': <span class="why">{escape(why)}</span>' if why else ""
        items.append(f'<li class="v-{_STATUS_CLASS[status]}" data-status="{status}">'
                     f'{_mark(SYMBOLS[status])} <span class="dtypes">'
                     f'{escape(", ".join(dtypes))}</span>{text}</li>')
    n = pair["counts"]
    worked = n["ok"] + n["copy"] + n["readonly_ignored"]
    verdict = pair["verdict"]
    apart = f' <span class="u">{n["unsupported"]} –</span>' if n["unsupported"] else ""
    return (f'<td class="v-{verdict}" data-provider="{escape(pair["provider"])}" '
            f'data-consumer="{escape(pair["consumer"])}" data-verdict="{verdict}">'
            f"<details><summary>{_mark(PAIR_SYMBOLS[verdict])} "
            f'<span class="n">{worked}/{pair["held"]}</span>{apart}</summary>'
            f'<ul class="cell">{"".join(items)}</ul></details></td>')


def _grid(result: dict) -> list[str]:
    pairs = {(x["provider"], x["consumer"]): x for x in result["pairs"]}
    by_pair: dict[tuple[str, str], list[dict]] = {}
    made: dict[str, set[str]] = {}
    for c in result["cells"]:
        by_pair.setdefault((c["provider"], c["consumer"]), []).append(c)
        made.setdefault(c["provider"], set()).add(c["dtype"])
    out = ['<section id="grid"><h2>Providers × consumers</h2>', '<div class="scroll">',
           '<table class="grid"><thead><tr>'
           '<th class="corner" scope="col">provider (m) ↓ consumer →</th>']
    out += [f'<th scope="col">{escape(c)}</th>' for c in result["consumers"]]
    out.append("</tr></thead><tbody>")
    for p in result["providers"]:
        row = [f'<tr><th scope="row">{escape(p)} ({len(made.get(p, ()))})</th>']
        for c in result["consumers"]:
            pair = pairs.get((p, c))
            row.append(_cell(pair, by_pair[p, c]) if pair else "<td></td>")
        out.append("".join(row) + "</tr>")
    out += ["</tbody></table></div>", f"<p>{escape(totals(result))}</p></section>"]
    return out


def _reasons(result: dict) -> list[str]:
    notes = reason_groups(result)
    if not notes:
        return []
    out = ['<section id="reasons"><h2>Reasons, each once, and where they hold</h2>',
           '<ol class="reasons">']
    out += [f'<li data-status="{status}"><span class="v-{_STATUS_CLASS[status]}">'
            f'{_mark(SYMBOLS[status])}</span> {escape(text)} <span class="where">— in: '
            f'{escape("; ".join(where))}</span></li>'
            for status, text, where in notes]
    return [*out, "</ol></section>"]


def _not_run(result: dict) -> list[str]:
    lines = unavailable_lines(result) + not_run_lines(result)
    if not lines:
        return []
    return ['<section id="not-run"><h2>Not run, and what would run it</h2><ul>',
            *[f"<li>{escape(line)}</li>" for line in lines], "</ul></section>"]


def render_html(result: dict) -> str:
    """The page for ``result`` (the JSON dict of a run): self-contained HTML5, every cell of
    the JSON with its status and reason, every tag closed."""
    h = result["header"]
    title = f"pydlpack {h['pydlpack']} interoperability matrix ({h['device']})"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{escape(title)}</title>", f"<style>{_CSS}</style></head><body>",
           *_header(h), "<main>"]
    if result.get("error"):
        out.append(f'<p class="error">{escape(result["error"])}</p>')
    out += [*_legend(), *_grid(result), *_reasons(result), *_not_run(result), "</main>",
            f"<footer><p>Made by <code>python -m dlpack --html</code>: the same data as "
            f"<code>--json</code> (schema {escape(result['schema'])}).</p></footer>",
            "</body></html>"]
    return "\n".join(out) + "\n"
