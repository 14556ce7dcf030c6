"""The include graph's check (.ci/include_graph.py, docs/spec.md §1): each name a .pxi uses is
its own or a file's included before it, every .pxi is included once, readers and writers share
names only through the shared files, and each group of DLPackObject's fields (_core.pxd) is
written only by its owners. Runs from a checkout (the script is not packaged)."""

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
    for path in [SRC / "_core.pyx", SRC / "_core.pxd", *SRC.rglob("*.pxi")]:
        target = out / path.relative_to(SRC)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return out


def test_the_tree_passes():
    got = run(SRC)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "0 problems" in got.stdout
    for group in ("description 0 of 1", "ownership 0 of 6", "producer_sync 0 of 2",
                  "export_policy 0 of 4", "caches 0 of 2"):
        assert group in got.stdout


def append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code)


@pytest.mark.parametrize(("code", "field", "group"), [
    ("cdef void _w(DLPackObject r):\n    r.desc.flags = 0\n", "desc", "description"),
    ("cdef void _w(DLPackObject r):\n    r.desc.dl.shape[0] += 1\n", "desc", "description"),
    ("cdef void _w(DLPackObject r):\n    memset(&r.desc, 0, 8)\n", "desc", "description"),
    ("cdef void _w(DLPackObject r, DLTensor *t):\n    memcpy(r.desc.dl.shape, t.shape, 8)\n",
     "desc", "description"),
    ("cdef void _w(DLPackObject r):\n    r._base = None\n", "_base", "ownership"),
    ("cdef void _w(DLPackObject r):\n    cdef Py_buffer *v = <Py_buffer *>&r._view\n", "_view",
     "ownership"),
    ("cdef void _w(DLPackObject r):\n    r.sync.kind = SYNC_NONE\n", "sync", "producer_sync"),
    ("cdef void _w(DLPackObject r):\n    r._plain_versioned = True\n", "_plain_versioned",
     "export_policy"),
])
def test_a_field_written_outside_its_owners_fails(tmp_path, code, field, group):
    """A writer assigning, taking the address of or copying into a group's field fails."""
    src = copy_tree(tmp_path)
    append(src / "_writers" / "dlpack.pxi", code)
    got = run(src)
    assert got.returncode == 1
    assert f"{field} in _w: a field of group {group} written outside its owners" in got.stdout


def test_reads_and_other_types_fields_pass(tmp_path):
    """Reads, a <const ...> address, comparisons and another type's field of the same name are
    no writes; an owner's write (a reader's, _own.pxi's) is none outside its owners."""
    src = copy_tree(tmp_path)
    append(src / "_writers" / "dlpack.pxi", """cdef int _r(DLPackObject r, _Other o):
    cdef const DLTensor *t = <const DLTensor *>&r.desc.dl
    o.desc = 1
    if r.desc.flags == 0 or r._base != None or r.sync.kind <= SYNC_NONE:
        return t.ndim
    return 0
""")
    append(src / "_readers" / "dlpack.pxi", "cdef void _w(DLPackObject r):\n    r.desc.flags = 0\n")
    append(src / "_own.pxi", "cdef void _w2(DLPackObject r):\n    r._base = None\n")
    got = run(src)
    assert got.returncode == 0, got.stdout


def swap(src: Path, a: str, b: str) -> None:
    """Swap two include lines of _core.pyx."""
    core = (src / "_core.pyx").read_text()
    a, b = f'include "{a}"', f'include "{b}"'
    (src / "_core.pyx").write_text(core.replace(a, "@@").replace(b, a).replace("@@", b))


def test_a_name_used_before_its_file_is_included_fails(tmp_path):
    """_own.pxi uses _cuda/memory.pxi's _DeviceMemory: included after it, that is a failure."""
    src = copy_tree(tmp_path)
    swap(src, "_own.pxi", "_cuda/memory.pxi")
    got = run(src)
    assert got.returncode == 1
    assert "_own.pxi uses _DeviceMemory, defined in _cuda/memory.pxi, which is included after " \
        "it" in got.stdout


@pytest.mark.parametrize(("first", "second", "problem"), [
    ("_cuda/driver.pxi", "_cuda/contexts.pxi",
     "_cuda/contexts.pxi uses _cu_load, defined in _cuda/driver.pxi, which is included after it"),
    ("_cuda/streams.pxi", "_cuda/sync.pxi",
     "_cuda/sync.pxi uses _consumer_stream, defined in _cuda/streams.pxi, which is included "
     "after it"),
    ("_cuda/contexts.pxi", "_cuda/memory.pxi",
     "_cuda/memory.pxi uses _cu_enter, defined in _cuda/contexts.pxi, which is included after "
     "it"),
])
def test_the_cuda_files_out_of_order_fail(tmp_path, first, second, problem):
    """The CUDA files (_cuda/) are checked as the others: one included before a file whose
    names it uses fails."""
    src = copy_tree(tmp_path)
    swap(src, first, second)
    got = run(src)
    assert got.returncode == 1
    assert problem in got.stdout


def test_a_file_left_out_missing_or_included_twice_fails(tmp_path):
    """A .pxi _core.pyx does not include (its names are then undefined where they are used), an
    include of a file that is not there and one included twice are failures."""
    src = copy_tree(tmp_path)
    core = (src / "_core.pyx").read_text()
    core = core.replace('include "_cuda/streams.pxi"', 'include "_cuda/stream.pxi"')
    core = core.replace('include "_cuda/ipc.pxi"', 'include "_cuda/ipc.pxi"\ninclude "_base.pxi"')
    (src / "_core.pyx").write_text(core)
    (src / "_cuda" / "unused.pxi").write_text("cdef int _nobody() except -1:\n    return 0\n")
    got = run(src)
    assert got.returncode == 1
    for problem in ("_core.pyx includes _cuda/stream.pxi, which does not exist",
                    "_core.pyx includes _base.pxi again",
                    "_cuda/streams.pxi is not included by _core.pyx",
                    "_cuda/unused.pxi is not included by _core.pyx",
                    "_cuda/sync.pxi uses _consumer_stream, defined in _cuda/streams.pxi, which is "
                    "not included"):
        assert problem in got.stdout, got.stdout


def test_a_writer_using_a_readers_name_fails(tmp_path):
    """A name of _readers/dlpack.pxi read in _writers/dlpack.pxi (included after it) still fails."""
    src = copy_tree(tmp_path)
    writer = src / "_writers" / "dlpack.pxi"
    writer.write_text(writer.read_text() + "\n\ncdef object _peek():\n    return _tf_eager\n")
    got = run(src)
    assert got.returncode == 1
    assert "_writers/dlpack.pxi uses _tf_eager of _readers/dlpack.pxi" in got.stdout
