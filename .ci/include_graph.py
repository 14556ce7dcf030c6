"""Check the graph of _core.pyx's included files: each name a .pxi uses is defined in itself or
in a file included before it, and the readers (_in/) and writers (_out/) use each other's names
only through the shared files (docs/spec.md §1's layout).

    python .ci/include_graph.py [SRC]     # SRC: the package directory (src/dlpack)

A file's names are what it defines at column 0 (cdef/cpdef/def functions, cdef classes,
structs, ctypedefs, fused types, module variables), the members of its enums and the names its
`cdef extern` blocks declare. Names _core.pyx defines itself (the core type) are every file's.
Exit status 1 on any such use: the fix moves the name to the file where it belongs.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

_INCLUDE = re.compile(r'^include\s+"([^"]+)"', re.M)
_FUNC = re.compile(r'(\w+)\s*(?:"[^"]*")?\s*\(')
_NAME = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = {"cdef", "cpdef", "def", "class", "struct", "union", "enum", "ctypedef", "inline",
             "public", "api", "readonly", "fused", "const", "unsigned", "signed", "long",
             "short", "extern", "from", "nogil", "noexcept", "packed"}


def includes(pyx: Path) -> list[str]:
    """The files _core.pyx includes, in order, relative to its directory."""
    return _INCLUDE.findall(pyx.read_text())


def _declared(decl: str) -> str | None:
    """The name a one-line C-style declaration introduces (a function's, else the last)."""
    decl = re.sub(r'"[^"]*"', lambda m: m.group(0) if "(" not in decl else "", decl)
    decl = decl.split("#")[0].strip().rstrip(":")
    if "(" in decl and not ("=" in decl and decl.index("=") < decl.index("(")):
        pointer = re.search(r"\(\s*\*\s*(\w+)", decl)     # a function pointer (type)
        if pointer:
            return pointer.group(1)
        head = re.sub(r"^\((?:[^()]*)\)\s*", "", re.sub(r"^(?:c?p?def|cdef)\s+", "", decl))
        m = _FUNC.search(head)
        return m.group(1) if m else None
    decl = decl.split("=")[0]
    names = [n for n in _NAME.findall(re.sub(r"\[.*?\]", "", decl)) if n not in _KEYWORDS]
    return names[-1] if names else None


def defined(text: str) -> set[str]:
    """The names a file defines (see the module's docstring)."""
    out: set[str] = set()
    lines = text.splitlines()
    block = None            # "enum", "extern", "skip": what the indented lines below belong to
    in_string = False       # inside a docstring or an extern block's verbatim C code
    for line in lines:
        odd = line.count('"""') % 2 == 1
        if in_string or not line.strip() or line.lstrip().startswith(("#", '"', "'")):
            in_string ^= odd
            continue
        in_string = odd
        if not line[0].isspace():
            block = "skip"
            first = line.split()[0]
            if re.match(r"(cdef|cpdef|ctypedef)(\s+(public|api))?\s+enum\b", line):
                block = "enum"
                name = re.match(r".*\benum\s+(\w+)", line)
                if name:
                    out.add(name.group(1))
            elif line.startswith("cdef extern"):
                block = "extern"
            elif re.match(r"(cdef|cpdef|ctypedef)\s+(struct|union|class|fused)\b|ctypedef\s+"
                          r"(struct|union|fused)\b", line) or re.match(
                              r"cdef\s+(public\s+|api\s+)*class\b", line):
                out.add(re.match(r".*\b(?:struct|union|class|fused)\s+(\w+)", line).group(1))
            elif first in ("cdef", "cpdef", "def", "ctypedef"):
                name = _declared(line)
                if name:
                    out.add(name)
            elif first == "class":
                out.add(re.match(r"class\s+(\w+)", line).group(1))
            elif re.match(r"\w+\s*(:[^=]*)?=[^=]", line):
                out.add(re.match(r"(\w+)", line).group(1))
            continue
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if block == "enum" and indent == 4:
            out.add(re.match(r"(\w+)", body).group(1))
        elif block == "extern" and indent == 4:
            if re.match(r"(ctypedef\s+)?(struct|union)\s+\w+", body):
                out.add(re.match(r".*\b(?:struct|union)\s+(\w+)", body).group(1))
            elif re.match(r"(ctypedef\s+)?enum\b", body):
                name = re.match(r".*\benum\s+(\w+)", body)
                if name:
                    out.add(name.group(1))
            elif not body.startswith(("pass", "cdef")):
                name = _declared(body)
                if name:
                    out.add(name)
        elif block == "extern" and indent == 8 and _enum_member(lines, line):
            out.add(re.match(r"(\w+)", body).group(1))
    return out


def _enum_member(lines: list[str], line: str) -> bool:
    """Whether an 8-column line of an extern block is an enum member (its block opens with
    ``enum``), not a struct field."""
    i = lines.index(line)
    while i > 0:
        i -= 1
        prev = lines[i]
        if prev.strip() and len(prev) - len(prev.lstrip()) == 4:
            return bool(re.match(r"\s+(ctypedef\s+)?enum\b", prev))
    return False


def used(text: str) -> set[str]:
    """The names a file reads: every name token but attributes, keyword arguments and the
    text of strings and comments (an f-string's fields are read)."""
    out: set[str] = set()
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    depth = 0
    for i, tok in enumerate(toks):
        if tok.type == tokenize.OP:
            depth += tok.string in "([{"
            depth -= tok.string in ")]}"
        elif tok.type == tokenize.NAME:
            prev = toks[i - 1].string if i else ""
            nxt = toks[i + 1].string if i + 1 < len(toks) else ""
            if prev != "." and not (depth and nxt == "="):
                out.add(tok.string)
        elif tok.type == tokenize.STRING and re.match(r"[rRbB]*[fF]", tok.string):
            for field in re.findall(r"(?<!\{)\{([^{}]*)\}", tok.string):
                out |= set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", field.split("!")[0]))
    return out


def side(name: str) -> str | None:
    return name.split("/")[0] if name.startswith(("_in/", "_out/")) else None


def problems(src: Path) -> list[str]:
    """Every use out of order or across _in/ and _out/."""
    files = includes(src / "_core.pyx")
    texts = {f: (src / f).read_text() for f in files}
    core = defined((src / "_core.pyx").read_text())
    owner: dict[str, str] = {}
    for f in files:
        for name in defined(texts[f]):
            owner.setdefault(name, f)
    order = {f: i for i, f in enumerate(files)}
    found = []
    for f in files:
        mine = defined(texts[f])
        for name in sorted(used(texts[f]) - mine - core):
            home = owner.get(name)
            if home is None:
                continue
            if order[home] > order[f]:
                found.append(f"{f} uses {name}, defined in {home}, which is included after it")
            elif side(f) and side(home) and side(f) != side(home):
                found.append(f"{f} uses {name} of {home}: the readers and writers share names "
                             "only through the shared files")
    return found


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "src/dlpack"
    found = problems(src)
    for line in found:
        print(f"include graph: {line}")
    files = includes(src / "_core.pyx")
    print(f"include graph: {len(files)} files, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
