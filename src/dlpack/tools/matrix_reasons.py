"""Where one reason of the interoperability matrix holds, said once (docs/spec.md §9).

The cells that share a reason are grouped into as few "providers → consumers (dtypes)" phrases
as their shape allows: a reason that holds for a provider's whole row says "every consumer", one
that holds for every provider of a dtype in a consumer's column says "every provider of" that
dtype, and a dtype list that is all a provider makes says "every dtype it makes". Pure functions
of the matrix's JSON dict, so the text, Markdown and HTML views group alike.
"""

from __future__ import annotations

from collections.abc import Iterable

EVERY_DTYPE = "every dtype it makes"


def _join(names: Iterable[str]) -> str:
    return ", ".join(names)


def grouped_places(result: dict, cells: Iterable[dict]) -> list[str]:
    """``cells`` (a subset of ``result["cells"]``, e.g. those with one reason) as phrases, in
    the providers' order: ``"duckdb → every consumer (int8, uint8)"``, ``"every provider of
    float16 → array_api_strict"``, ``"jax, tensorflow → torch (every dtype they make)"``,
    ``"bytes → torch (uint8)"``. Every cell is in exactly one phrase."""
    order = {d: i for i, d in enumerate(result["dtypes"])}
    every_consumer = list(result["consumers"])
    made: dict[str, set[str]] = {}
    have: set[tuple[str, str, str]] = set()
    for c in result["cells"]:
        made.setdefault(c["provider"], set()).add(c["dtype"])
        have.add((c["provider"], c["consumer"], c["dtype"]))
    pairs: dict[tuple[str, str], list[str]] = {}
    for c in cells:
        pairs.setdefault((c["provider"], c["consumer"]), []).append(c["dtype"])
    # One row at a time: the consumers of each provider that share one dtype list ...
    rows: dict[str, dict[tuple[str, ...], list[str]]] = {}
    for p in result["providers"]:
        for c in result["consumers"]:
            if (p, c) in pairs:
                dtypes = tuple(sorted(set(pairs[p, c]), key=order.__getitem__))
                rows.setdefault(p, {}).setdefault(dtypes, []).append(c)
    # ... then the providers whose consumers and dtype lists are the same: one phrase.
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for p, by_dtypes in rows.items():
        for dtypes, consumers in by_dtypes.items():
            whole = len(dtypes) > 1 and set(dtypes) == made[p]
            key = (tuple(consumers), (EVERY_DTYPE,) if whole else dtypes)
            groups.setdefault(key, []).append(p)
    out = []
    for (consumers, dtypes), providers in groups.items():
        whom = "every consumer" if len(consumers) > 1 and list(consumers) == every_consumer \
            else _join(consumers)
        if dtypes == (EVERY_DTYPE,):
            what = EVERY_DTYPE if len(providers) == 1 else "every dtype they make"
            out.append(f"{_join(providers)} → {whom} ({what})")
            continue
        makers = [p for p in result["providers"]
                  if all((p, c, d) in have for c in consumers for d in dtypes)]
        if len(providers) > 1 and providers == makers:
            out.append(f"every provider of {_join(dtypes)} → {whom}")
        else:
            out.append(f"{_join(providers)} → {whom} ({_join(dtypes)})")
    return out
