"""MkDocs hooks of the docs site (mkdocs.yml): the README as its front page (its links into docs/
made site-relative), the changelog and the benchmarks' README beside the docs, every page of
docs/guide/ in the nav after the guide's index, and the API reference generated from the stubs
(src/dlpack/__init__.pyi, _core.pyi; _types.py where it has no stub) and the docstrings of the
installed package: every name of ``dlpack.__all__``, its signature and the first paragraph of
its docstring (a constant's: its ``#:`` comment). No network, no extra dependency."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "dlpack"
# Files outside docs/ that the site holds: its path there, and the repository file.
OUTSIDE = {"index.md": "README.md", "changelog.md": "CHANGELOG.md",
           "benchmarks.md": "benchmarks/README.md"}
LINK = re.compile(r"\]\(([^)#\s]+)")
INTERNAL = {"Labelled"}         # a base class that only carries 0.2.1's spellings (_deprecated)


def on_config(config):
    """The guide's section of the nav: its index, then every other page of docs/guide/ in name
    order, so a new page is on the site without an edit here."""
    nav = config["nav"]
    for i, entry in enumerate(nav):
        if entry == {"Guide": "guide/README.md"}:
            pages = sorted(p.name for p in (ROOT / "docs" / "guide").glob("*.md"))
            nav[i] = {"Guide": [f"guide/{name}" for name in
                                ["README.md", *(p for p in pages if p != "README.md")]]}
    return config


def on_files(files: Files, config) -> Files:
    for uri, source in OUTSIDE.items():
        files.append(File.generated(config, uri, content=_relinked((ROOT / source).read_text())))
    files.append(File.generated(config, "api.md", content=api_page()))
    return files


def _relinked(text: str) -> str:
    """A repository file's links as the site's: docs/X is X, the other files OUTSIDE name theirs."""
    site = {source: uri for uri, source in OUTSIDE.items()}

    def link(m: re.Match[str]) -> str:
        target = m.group(1)
        if target.startswith("docs/"):
            target = target[len("docs/"):]
        return "](" + site.get(target, target)

    return LINK.sub(link, text)


# -- the API reference ----------------------------------------------------------------------------

def _module(name: str) -> ast.Module:
    """The stub of dlpack.NAME, or its source where it has none."""
    path = PACKAGE / f"{name}.pyi"
    return ast.parse((path if path.is_file() else PACKAGE / f"{name}.py").read_text())


def _definitions(tree: ast.Module) -> dict[str, ast.stmt]:
    """Top-level definitions by name (the first overload not marked deprecated)."""
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            if node.name not in found and not _deprecated(node):
                found[node.name] = node
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.setdefault(node.target.id, node)
    return found


def _deprecated(node: ast.FunctionDef | ast.ClassDef) -> bool:
    return any("deprecated" in ast.unparse(d) for d in node.decorator_list)


def _signature(name: str, node: ast.stmt) -> str:
    if isinstance(node, ast.FunctionDef):
        returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
        args = re.sub(r"^self(, )?", "", ast.unparse(node.args))
        return f"{name}({args}){returns}"
    if isinstance(node, ast.ClassDef):          # bases that are pydlpack's internals left out
        bases = ", ".join(b for b in map(ast.unparse, node.bases) if b not in INTERNAL)
        return f"class {name}({bases})" if bases else f"class {name}"
    if isinstance(node, ast.AnnAssign):
        return f"{name}: {ast.unparse(node.annotation)}"
    return f"{name} = {ast.unparse(node.value)}"       # type: ignore[attr-defined]


def _comment(path: Path, name: str) -> str:
    """A constant's ``#:`` comment, the lines just above its assignment."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"{re.escape(name)}\s*[:=]", line):
            above = []
            while i > 0 and lines[i - 1].lstrip().startswith("#:"):
                i -= 1
                above.insert(0, lines[i].lstrip()[2:].strip())
            return " ".join(above)
    return ""


def _paragraph(obj: object) -> str:
    """The first paragraph of a docstring, past a Cython signature line."""
    own = getattr(obj, "__doc__", None)
    name = getattr(obj, "__name__", None)
    generic = {getattr(t, name).__doc__ for t in (object, int, dict, bytearray)
               if isinstance(name, str) and hasattr(t, name)}
    if not isinstance(own, str) or own in generic:
        return ""                               # none of its own (a C slot's generic text)
    doc = inspect.cleandoc(own).replace("``", "`")
    paragraphs = [p.strip() for p in doc.split("\n\n") if p.strip()]
    if paragraphs and re.match(r"^[\w.]+\(.*\)$", paragraphs[0], re.S):
        paragraphs = paragraphs[1:]
    return " ".join(paragraphs[0].split()) if paragraphs else ""


def _members(node: ast.ClassDef, cls: type) -> list[str]:
    """A class's members declared in its stub: signature and docstring paragraph each."""
    out = []
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            prop = any(ast.unparse(d) == "property" for d in item.decorator_list)
            sig = (f"{item.name}: {ast.unparse(item.returns)}" if prop and item.returns
                   else _signature(item.name, item))
            doc = _paragraph(getattr(cls, item.name, None))
            if doc or not item.name.startswith("_"):    # a special method says what it is for
                out.append(f"- `{sig}`" + (f": {doc}" if doc else ""))
    return out


def api_page() -> str:
    """The API reference: one section per name of the stub's ``__all__``, in its order."""
    import dlpack

    init = ast.parse((PACKAGE / "__init__.pyi").read_text())
    public = next(ast.literal_eval(n.value) for n in init.body if isinstance(n, ast.Assign)
                  and ast.unparse(n.targets[0]) == "__all__")
    home: dict[str, str] = {}                  # name -> the module defining it
    for node in init.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dlpack."):
            for alias in node.names:
                home[alias.name] = node.module.split(".", 1)[1]
    trees = {m: _definitions(_module(m)) for m in set(home.values())}
    own = _definitions(init)
    lines = ["# API reference", "",
             "Every public name of `dlpack` (its `__all__`), with its signature from the type",
             "stubs and the first paragraph of its docstring; generated when the site is built",
             "(`.ci/mkdocs_hooks.py`). The contract behind each is [the spec](spec.md) §2.", ""]
    for name in public:
        module = home.get(name)
        node = trees[module][name] if module else own[name]
        obj = getattr(dlpack, name)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            doc = _paragraph(obj)
        else:
            path = PACKAGE / (f"{module}.py" if module else "__init__.pyi")
            doc = _comment(path, name)
        heading = name.replace("_", r"\_")      # __version__ is a name, not bold
        lines += [f"## {heading}", "", f"`{_signature(name, node)}`", "", doc, ""]
        if isinstance(node, ast.ClassDef):
            members = _members(node, obj)
            if issubclass(obj, int):            # an enum: its members and values
                members = [", ".join(f"`{m.name} = {int(m)}`" for m in obj)]
            lines += [*members, ""] if members else []
    return "\n".join(lines)
