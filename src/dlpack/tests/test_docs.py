"""The ``>>>`` examples of README.md, docs/*.md and docs/guide/*.md run and give the output
shown (the docs are output: spec §1). Each example block (examples not parted by prose) runs in
fresh globals; a block that imports a library not installed here is skipped, naming it. The
docs are found in the checkout the package runs from, or in the one ``PYDLPACK_DOCS`` names (CI
tests the installed package so); without either the module skips."""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack

ROOT = Path(os.environ.get("PYDLPACK_DOCS") or Path(dlpack.__file__).resolve().parents[2])
FENCE = re.compile(r"^[ ]*```.*$", re.M)
IMPORT = re.compile(r"^\s*(?:import\s+([\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)"
                    r"|from\s+([\w.]+)\s+import)", re.M)


def _documents() -> list[Path]:
    if not (ROOT / "pyproject.toml").is_file() or 'name = "pydlpack"' not in \
            (ROOT / "pyproject.toml").read_text():
        return []
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "docs" / "guide").glob("*.md"))]


def _blocks(path: Path) -> list[tuple[int, list[doctest.Example]]]:
    """(line, examples) of each block of examples in a Markdown file; code fences are blank
    lines to the parser, so an expected output ends where its block does."""
    text = FENCE.sub("", path.read_text())
    blocks: list[tuple[int, list[doctest.Example]]] = []
    current: list[doctest.Example] = []
    for part in doctest.DocTestParser().parse(text, str(path)):
        if isinstance(part, doctest.Example):
            current.append(part)
        elif part.strip() and current:            # prose between examples: a new block
            blocks.append((current[0].lineno + 1, current))
            current = []
    if current:
        blocks.append((current[0].lineno + 1, current))
    return blocks


def _missing(examples: list[doctest.Example]) -> list[str]:
    """The top-level modules the block imports that are not installed."""
    names = set()
    for e in examples:
        for plain, source in IMPORT.findall(e.source):
            for item in plain.split(",") if plain else [source]:
                names.add(item.split()[0].split(".")[0])
    return sorted(n for n in names if not _installed(n))


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):         # e.g. a sys.modules entry of None
        return False


CASES = [pytest.param(path, examples, id=f"{path.relative_to(ROOT)}:{line}")
         for path in _documents() for line, examples in _blocks(path)]


@pytest.mark.skipif(not CASES, reason="no docs here: pydlpack installed without its checkout")
@pytest.mark.parametrize("path, examples", CASES or [pytest.param(None, None, id="none")])
def test_doc_examples(path, examples):
    missing = _missing(examples)
    if missing:
        pytest.skip(f"the example needs {', '.join(missing)}, not installed")
    test = doctest.DocTest(examples, {"__name__": "__doc__"}, str(path), str(path),
                           examples[0].lineno, None)
    out: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)


def test_docs_have_examples():
    """The harness finds what it should: the README's blocks, and docs/spec.md's seed."""
    if not CASES:
        pytest.skip("no docs here: pydlpack installed without its checkout")
    files = {p.values[0].name for p in CASES}
    assert {"README.md", "spec.md"} <= files and len(CASES) >= 5


def test_blocks_of_absent_libraries_are_skipped():
    """What a block imports is found in every spelling the docs use; absent ones are named."""
    block = [doctest.Example("import numpy, no_such_lib_a as a, json\n", ""),
             doctest.Example("from no_such_lib_b.sub import x\n", ""),
             doctest.Example("import torch.utils\n", "")]
    assert _missing(block)[:2] == ["no_such_lib_a", "no_such_lib_b"]


TROUBLESHOOTING = ROOT / "docs" / "guide" / "troubleshooting.md"


def _sections(path: Path) -> dict[str, str]:
    """A Markdown page's ``## `` sections by heading."""
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _missing_driver_message() -> str:
    """The refusal of CUDA data where libcuda cannot be loaded (a driver path that does not
    exist stands for a machine without it)."""
    from dlpack import _core

    missing = "libcuda-not-here.so.1"
    _core._cuda_driver(None, missing)
    try:
        with pytest.raises(dlpack.CudaError) as e:
            dlpack.asdlpack(bytearray(8)).__dlpack__(dl_device=(2, 0))
    finally:
        _core._cuda_driver(None)
    return str(e.value).replace(missing, "libcuda.so.1")


def _torch_negative_strides_abort() -> str:
    """What torch prints as it ends the process on a negative stride (in a child process)."""
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("numpy", reason="numpy is not installed")
    run = subprocess.run([sys.executable, "-c", "import numpy, torch; from dlpack import asdlpack; "
                          "torch.from_dlpack(asdlpack(numpy.arange(6.0)[::-1]))"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0, "torch no longer aborts: the page's section is out of date"
    return run.stderr


# The troubleshooting sections whose message no example can show, each with what the code really
# prints; the page quotes it in a ```text block, which must be (a part of) that.
QUOTED = {"No CUDA driver": _missing_driver_message,
          "torch aborts on negative strides": _torch_negative_strides_abort}


def test_every_troubleshooting_section_is_checked():
    """Each section runs an example, or quotes a message a test below compares with the code's."""
    if not TROUBLESHOOTING.is_file():
        pytest.skip("no docs here: pydlpack installed without its checkout")
    unchecked = [h for h, body in _sections(TROUBLESHOOTING).items()
                 if ">>> " not in body and h not in QUOTED]
    assert not unchecked, f"sections with no example and no checked quote: {unchecked}"
    assert set(QUOTED) <= set(_sections(TROUBLESHOOTING)), "QUOTED names a section the page lacks"


@pytest.mark.parametrize("heading", QUOTED)
def test_troubleshooting_quotes_the_real_message(heading):
    """The page's quoted message is the code's (the whole of it, or, for torch's abort, lines
    of what it prints)."""
    if not TROUBLESHOOTING.is_file():
        pytest.skip("no docs here: pydlpack installed without its checkout")
    quoted = re.search(r"```text\n(.*?)\n```", _sections(TROUBLESHOOTING)[heading], re.S).group(1)
    real = QUOTED[heading]()
    assert quoted == real or quoted in real, f"the page says:\n{quoted}\nthe code:\n{real}"
