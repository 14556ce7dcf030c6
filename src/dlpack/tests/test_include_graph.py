"""The include graph's check (.ci/include_graph.py, docs/spec.md §1): each name a .pxi uses is
its own or a file's included before it, and readers and writers share names only through the
shared files. Runs from a checkout (the script is not packaged)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1]
SCRIPT = SRC.parents[1] / ".ci" / "include_graph.py"

pytestmark = pytest.mark.skipif(not SCRIPT.exists() or not (SRC / "_core.pyx").exists(),
                                reason="needs a checkout (.ci/include_graph.py, the .pxi files)")


def run(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(src)], capture_output=True,
                          text=True, timeout=120)


def copy_tree(tmp_path: Path) -> Path:
    """The package's _core.pyx and .pxi files, to be edited."""
    out = tmp_path / "dlpack"
    for path in [SRC / "_core.pyx", *SRC.glob("*.pxi"), *SRC.glob("_in/*.pxi"),
                 *SRC.glob("_out/*.pxi")]:
        target = out / path.relative_to(SRC)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return out


def test_the_tree_passes():
    got = run(SRC)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "0 problems" in got.stdout


def test_a_name_used_before_its_file_is_included_fails(tmp_path):
    """_own.pxi uses _cuda.pxi's _DeviceMemory: included after it, that is a failure."""
    src = copy_tree(tmp_path)
    core = (src / "_core.pyx").read_text()
    own, cuda = 'include "_own.pxi"', 'include "_cuda.pxi"'
    core = core.replace(own, "@@").replace(cuda, own).replace("@@", cuda)
    (src / "_core.pyx").write_text(core)
    got = run(src)
    assert got.returncode == 1
    assert "_own.pxi uses _DeviceMemory, defined in _cuda.pxi, which is included after it" \
        in got.stdout


def test_a_writer_using_a_readers_name_fails(tmp_path):
    """A name of _in/dlpack.pxi read in _out/dlpack.pxi (included after it) still fails."""
    src = copy_tree(tmp_path)
    writer = src / "_out" / "dlpack.pxi"
    writer.write_text(writer.read_text() + "\n\ncdef object _peek():\n    return _tf_eager\n")
    got = run(src)
    assert got.returncode == 1
    assert "_out/dlpack.pxi uses _tf_eager of _in/dlpack.pxi" in got.stdout
