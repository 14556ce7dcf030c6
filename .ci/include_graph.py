"""Check the graph of _core.pyx's included files: each name a .pxi uses is defined in itself or
in a file included before it, every .pxi of the package (its subdirectories _cuda/, _readers/ and
_writers/ too) is included once and every include names a file, the readers (_readers/) and
writers (_writers/) use each other's names only through the shared files, and each group of
DLPackObject's fields is written only by its owners (docs/spec.md §1's layout).

    python .ci/include_graph.py [SRC]     # SRC: the package directory (src/dlpack)

A file's names are what it defines at column 0 (cdef/cpdef/def functions, cdef classes,
structs, ctypedefs, fused types, module variables), the members of its enums and the names its
`cdef extern` blocks declare. Names _core.pxd and _core.pyx define (the core type) are every file's.

The groups are read from the class's declaration (_core.pxd): a comment
``# group NAME, written by: OWNER...`` (continued on comment lines indented further) heads the
fields declared below it. An owner is a directory (``_readers/``), a file (``_own.pxi``), a
function or a method (``DLPackObject._validate``). A field is written where it is assigned
(also augmented, or through a member or an index: ``r.desc.dl.shape[i] = n``), where its
address is taken other than by a ``<const ...>`` cast, and where it is memcpy's or memset's
destination. Writes through a pointer kept elsewhere are not seen.
Exit status 1 on any such use: the fix moves the name (or the write) where it belongs.
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
    return name.split("/")[0] if name.startswith(("_readers/", "_writers/")) else None


def unincluded(src: Path, files: list[str]) -> list[str]:
    """The package's .pxi files _core.pyx does not include (their names are defined nowhere the
    compiler looks), relative to src."""
    return sorted(p.relative_to(src).as_posix() for p in src.rglob("*.pxi")
                  if p.relative_to(src).as_posix() not in files)


def problems(src: Path) -> list[str]:
    """Every use out of order or across _readers/ and _writers/, every include of a missing
    file or of one included already, and every .pxi left out."""
    listed = includes(src / "_core.pyx")
    found = [f"_core.pyx includes {f}, which does not exist" for f in listed
             if not (src / f).is_file()]
    found += [f"_core.pyx includes {f} again" for i, f in enumerate(listed) if f in listed[:i]]
    files = list(dict.fromkeys(f for f in listed if (src / f).is_file()))
    left_out = unincluded(src, files)
    found += [f"{f} is not included by _core.pyx" for f in left_out]
    texts = {f: (src / f).read_text() for f in files + left_out}
    core = defined((src / "_core.pyx").read_text())
    if (src / "_core.pxd").exists():
        core |= defined((src / "_core.pxd").read_text())
    owner: dict[str, str] = {}
    for f in files + left_out:
        for name in defined(texts[f]):
            owner.setdefault(name, f)
    order = {f: i for i, f in enumerate(files)}
    for f in files:
        mine = defined(texts[f])
        for name in sorted(used(texts[f]) - mine - core):
            home = owner.get(name)
            if home is None:
                continue
            if home not in order:
                found.append(f"{f} uses {name}, defined in {home}, which is not included")
            elif order[home] > order[f]:
                found.append(f"{f} uses {name}, defined in {home}, which is included after it")
            elif side(f) and side(home) and side(f) != side(home):
                found.append(f"{f} uses {name} of {home}: the readers and writers share names "
                             "only through the shared files")
    return found


_GROUP = re.compile(r"#\s*group (\w+), written by:(.*)")
_FIELD = re.compile(r"\s+cdef\s+(?:public\s+|readonly\s+)?[\w .*]*?[\s*](\w+)(?:\[.*\])?"
                    r"\s*(?:#.*)?$")
_ASSIGN = r"(?:\.\w+|\[[^\]]*\])*\s*(?:[-+*/%&|^]|//|<<|>>)?=(?!=)"
_CORE_TYPE = "DLPackObject"
_DEF = re.compile(r"(?:(?:cdef|cpdef)\s+(?:inline\s+)?[^(=]*?|def\s+)(\w+)\s*\(")


def groups(src: Path) -> dict[str, tuple[list[str], list[str]]]:
    """The field groups of the core type's declaration: name -> (fields, owners)."""
    pxd = src / "_core.pxd"
    lines = (pxd if pxd.exists() else src / "_core.pyx").read_text().splitlines()
    out: dict[str, tuple[list[str], list[str]]] = {}
    current = None
    heading = False         # on the comment lines that head a group (its owners)
    for line in lines:
        m = _GROUP.search(line)
        if m:
            current = out.setdefault(m.group(1), ([], []))
            current[1].extend(m.group(2).split())
            heading = True
            continue
        if heading and re.match(r"\s*#\s{2,}\S", line):
            current[1].extend(line.split("#", 1)[1].split())
            continue
        heading = False
        if current is not None and not re.match(r"\s", line) and line.strip():
            current = None              # the class ends
        field = _FIELD.match(line)
        if current is not None and field and "(" not in line.split("#")[0]:
            current[0].append(field.group(1))
    return out


def _code(line: str) -> str:
    """A line without its comment and the text of its strings."""
    line = re.sub(r"'[^']*'|\"[^\"]*\"", '""', line)
    return line.split("#")[0]


def writes(text: str, fields: list[str]):
    """(line number, function, field) of every write of one of fields in a file's text, through
    a name the function types as the core type (or a method's self); function is
    'Class.method', 'name' or None at module level."""
    alt = "|".join(map(re.escape, fields))
    assign = re.compile(rf"(?<![\w.])(\w+)\.({alt})\b(?={_ASSIGN})")
    address = re.compile(rf"(<\s*const\b[^>]*>\s*)?&\s*\(?(\w+)\.({alt})\b")
    dest = re.compile(rf"\b(?:memcpy|memset|memmove)\s*\(\s*(?:<[^>]*>\s*)?(\w+)\.({alt})\b")
    cls = func = None
    typed: set[str] = set()     # the names the current function types as the core type
    in_string = False
    for number, line in enumerate(text.splitlines(), 1):
        odd = line.count('"""') % 2 == 1
        if in_string:
            in_string ^= odd
            continue
        in_string = odd and not line.lstrip().startswith("#")
        if in_string:
            continue
        code = _code(line)
        indent = len(line) - len(line.lstrip())
        if code.strip() and indent == 0:
            c = re.match(r"cdef\s+(?:public\s+|api\s+)*class\s+(\w+)", code)
            d = _DEF.match(code)
            cls, func = (c.group(1), None) if c else (None, d.group(1) if d else None)
            typed = set()
        elif cls and code.strip() and indent == 4:
            d = _DEF.match(code.strip())
            func = f"{cls}.{d.group(1)}" if d else None
            typed = {"self"} if cls == _CORE_TYPE else set()
        typed |= set(re.findall(rf"\b{_CORE_TYPE}\s+(\w+)", code))
        for m in assign.finditer(code):
            if m.group(1) in typed:
                yield number, func, m.group(2)
        for m in address.finditer(code):
            if not m.group(1) and m.group(2) in typed:
                yield number, func, m.group(3)
        for m in dest.finditer(code):
            if m.group(1) in typed:
                yield number, func, m.group(2)


def _owns(owner: str, path: str, func: str | None) -> bool:
    """Whether owner (a directory, a file, a class, a function or a method) covers a write in
    func of path."""
    if owner.endswith("/"):
        return path.startswith(owner)
    if owner.endswith((".pxi", ".pyx")):
        return path == owner
    return func is not None and owner in (func, func.split(".")[0])


def stray_writes(src: Path) -> dict[str, list[str]]:
    """group -> each write of its fields outside its owners ('file:line: field in func')."""
    files = ["_core.pyx", *dict.fromkeys(f for f in includes(src / "_core.pyx")
                                         if (src / f).is_file())]
    found: dict[str, list[str]] = {}
    for group, (fields, owners) in groups(src).items():
        found[group] = []
        for f in files:
            for number, func, field in writes((src / f).read_text(), fields):
                if not any(_owns(o, f, func) for o in owners):
                    found[group].append(f"{f}:{number}: {field} in {func or 'module code'}")
    return found


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "src/dlpack"
    found = problems(src)
    for line in found:
        print(f"include graph: {line}")
    stray = stray_writes(src)
    declared = groups(src)
    for group, lines in stray.items():
        for line in lines:
            print(f"include graph: {line}: a field of group {group} written outside its "
                  "owners")
    counts = ", ".join(f"{g} {len({w.split()[1] for w in lines})} of "
                       f"{len(declared[g][0])} ({len(lines)} writes)"
                       for g, lines in stray.items())
    files = includes(src / "_core.pyx")
    total = len(found) + sum(map(len, stray.values()))
    print(f"include graph: {len(files)} files, {total} problems; fields written outside their "
          f"owners: {counts or 'no groups declared'}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
