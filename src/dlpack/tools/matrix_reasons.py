"""The interoperability matrix's reasons (docs/spec.md §9): who raised each one, in words a
reader can act on (``attributed``), and where one holds, said once (``grouped_places``).

The cells that share a reason are grouped into as few "providers → consumers (dtypes)" phrases
as their shape allows: a reason that holds for a provider's whole row says "every consumer", one
that holds for every provider of a dtype in a consumer's column says "every provider of" that
dtype, and a dtype list that is all a provider makes says "every dtype it makes". Pure functions
of the matrix's JSON dict, so the text, Markdown and HTML views group alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dlpack._types import DLDataTypeCode

EVERY_DTYPE = "every dtype it makes"

# Packages as the matrix names them (the distribution a reader installs), where they differ.
_LIBRARY_NAMES = {"dlpack": "pydlpack", "jaxlib": "jax", "builtins": "Python"}
# DLPack type codes in another library's words: "Type Codes: 10", "type code 10", "dtype code 12"
_TYPE_CODES = re.compile(r"\b(?:d?type|data type) codes?\b\W{0,3}(\d+(?:\s*,\s*\d+)*)", re.I)


def _package(module: object) -> str | None:
    if not isinstance(module, str) or not module:
        return None
    top = module.partition(".")[0]
    return _LIBRARY_NAMES.get(top, top)


def raised_by(e: BaseException, called: str) -> str:
    """The library that raised ``e`` while the matrix called into module ``called``:
    the exception type's own package when it is a library's (TensorFlow's
    ``InvalidArgumentError``), else the package of the innermost Python frame that raised it
    (a Cython frame counts: its module is named), unless that is the matrix's own code (a C
    function called from it, NumPy's ``from_dlpack``), or Python's: then ``called``."""
    package = _package(type(e).__module__)
    if package not in (None, "Python", "pydlpack"):
        return package
    tb, innermost = e.__traceback__, None
    while tb is not None:
        innermost = tb.tb_frame.f_globals.get("__name__")
        tb = tb.tb_next
    if isinstance(innermost, str) and not innermost.startswith("dlpack.tools"):
        return _package(innermost) or str(_package(called))
    return package if package == "pydlpack" else str(_package(called))


def decoded(reason: str) -> str:
    """``reason`` with each DLPack type code it names given its dtype name: ``Unsupported Type
    Codes: 10 (DLPack type code 10: float8_e4m3fn)``."""
    def name(code: str) -> str:
        try:
            member = DLDataTypeCode(int(code))
        except ValueError:
            return f"{code}: not a DLPack type code"
        return f"{code}: {member.name[3:].lower()}"

    def expand(m: re.Match) -> str:
        codes = re.findall(r"\d+", m.group(1))
        word = "code" if len(codes) == 1 else "codes"
        return f"{m.group(0)} (DLPack type {word} {', '.join(name(c) for c in codes)})"

    return _TYPE_CODES.sub(expand, reason)


def attributed(e: BaseException, called: str, text: str) -> str:
    """A cell's reason: the library that raised ``e`` (``raised_by``) and ``text`` (the
    exception as one line), its DLPack type codes decoded."""
    return f"{raised_by(e, called)}: {decoded(text)}"


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
    for (takers, dtypes_of), providers in groups.items():
        whom = "every consumer" if len(takers) > 1 and list(takers) == every_consumer \
            else _join(takers)
        if dtypes_of == (EVERY_DTYPE,):
            what = EVERY_DTYPE if len(providers) == 1 else "every dtype they make"
            out.append(f"{_join(providers)} → {whom} ({what})")
            continue
        makers = [p for p in result["providers"]
                  if all((p, c, d) in have for c in takers for d in dtypes_of)]
        if len(providers) > 1 and providers == makers:
            out.append(f"every provider of {_join(dtypes_of)} → {whom}")
        else:
            out.append(f"{_join(providers)} → {whom} ({_join(dtypes_of)})")
    return out
