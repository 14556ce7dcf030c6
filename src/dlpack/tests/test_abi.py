"""The vendored dlpack.h is the one source of the ABI: _types, dlpack.ctypes and the core agree."""

from __future__ import annotations

import ctypes
import os
import re

import pytest

import dlpack
import dlpack.ctypes as dlc
from dlpack import _core, _types

HEADER = os.path.join(os.path.dirname(dlpack.__file__), "include", "dlpack", "dlpack.h")


def header() -> str:
    if not os.path.exists(HEADER):
        pytest.skip(f"{HEADER} is not installed")
    with open(HEADER) as f:
        return f.read()


def enum_values(name: str) -> dict[str, int]:
    """The members of a C enum in dlpack.h (explicit values, or counting on from the last)."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*|^#[^\n]*", "", header(), flags=re.S | re.M)
    end = re.search(r"\}\s*" + name + ";", text)
    assert end, name
    text = text[text.rindex("{", 0, end.start()) + 1:end.start()]
    values, nxt = {}, 0
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, _, value = (p.strip() for p in item.partition("="))
        nxt = int(value.rstrip("Uu"), 0) if value else nxt
        values[key] = nxt
        nxt += 1
    return values


def test_version_and_flags_match_the_header():
    text = header()
    major = int(re.search(r"#define DLPACK_MAJOR_VERSION (\d+)", text).group(1))
    minor = int(re.search(r"#define DLPACK_MINOR_VERSION (\d+)", text).group(1))
    assert _types.DLPACK_VERSION == (major, minor) == _core._abi_layout()["version"]
    assert _core._abi_layout()["flags"] == (
        _types.FLAG_BITMASK_READ_ONLY, _types.FLAG_BITMASK_IS_COPIED,
        _types.FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)


@pytest.mark.parametrize(("enum", "name"), [(_types.DLDeviceType, "DLDeviceType"),
                                            (_types.DLDataTypeCode, "DLDataTypeCode")])
def test_enums_match_the_header(enum, name):
    assert {m.name: int(m) for m in enum} == enum_values(name)


@pytest.mark.parametrize("struct", ["DLTensor", "DLManagedTensor", "DLManagedTensorVersioned",
                                    "DLPackExchangeAPI"])
def test_ctypes_structures_match_the_compiled_header(struct):
    size, offsets = _core._abi_layout()[struct]
    cls = getattr(dlc, struct)
    assert ctypes.sizeof(cls) == size
    assert {name: getattr(cls, name).offset for name in offsets} == offsets


def test_get_include_compiles_a_c_extension(tmp_path):
    """``dlpack.get_include()`` is the directory a C extension builds against (as
    ``numpy.get_include()``): a shared object compiled with ``-I`` it and
    ``#include <dlpack/dlpack.h>`` agrees with dlpack.ctypes and pydlpack on the ABI, and frees
    a tensor pydlpack hands it."""
    import shutil
    import subprocess

    include = dlpack.get_include()
    assert os.path.isfile(os.path.join(include, "dlpack", "dlpack.h"))
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "ext.c").write_text(
        "#include <dlpack/dlpack.h>\n"
        "int major(void) { return DLPACK_MAJOR_VERSION; }\n"
        "unsigned long tensor_size(void) { return sizeof(DLTensor); }\n"
        "long first(DLManagedTensorVersioned *m) {\n"
        "    long v = ((unsigned char *)m->dl_tensor.data)[m->dl_tensor.byte_offset];\n"
        "    m->deleter(m);\n"
        "    return v;\n"
        "}\n")
    out = tmp_path / "ext.so"
    subprocess.run([cc, "-shared", "-fPIC", "-Wall", "-Werror", f"-I{include}", "-o", str(out),
                    str(tmp_path / "ext.c")], check=True)
    ext = ctypes.CDLL(str(out))
    ext.tensor_size.restype = ctypes.c_ulong
    ext.first.restype = ctypes.c_long
    assert (ext.major(), _types.DLPACK_VERSION[0]) == (1, 1)
    assert ext.tensor_size() == ctypes.sizeof(dlc.DLTensor)
    assert ext.first(dlc.to_pointer(b"\x2a\x01")) == 42
