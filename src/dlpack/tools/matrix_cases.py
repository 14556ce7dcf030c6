"""What the interoperability matrix exchanges, and one exchange graded: the providers and
consumers (name -> (module to import, function, device)), the dtypes and their values, the
statuses a cell can end in, and ``run_cell``.

Each cell is one real exchange of a 6-element array, graded by what was measured: ``ok``
(zero-copy, values read back right), ``copy`` (right values, but the consumer or the provider
copied), ``readonly_ignored`` (zero-copy of read-only memory into a result that reports itself
writable), ``fail`` (with the reason), ``unverified`` (exchanged, but the values could not be read
back, with why) or ``wrong`` (values read and different: a bug); a failed exchange whose control
without pydlpack fails too on the side at fault is ``unsupported`` (``matrix_control``).

Same machine, same libraries, same cells: each provider's CPU data is placed on a 64-byte
boundary (made again until it is), and a consumer that shares only aligned data (measured once
per run) has that said in its cells' ``note``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # before TensorFlow is imported: no C++ logs

import ctypes
import importlib
import struct
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dlpack import DLDeviceType, asdlpack, todict
from dlpack._types import FLAG_BITMASK_READ_ONLY
from dlpack.tools.matrix_reasons import attributed

ALIGNMENT = 64          # where providers' CPU data is placed (JAX shares only such data)

DTYPES = [
    "bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32",
    "float64", "complex64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2",
]
VALUES = [0, 1, 2, 3, 4, 5]
_ARRAY_CODES = {"int8": "b", "uint8": "B", "int16": "h", "int32": "i", "int64": "q",
                "uint64": "Q", "float32": "f", "float64": "d"}
_MEMORYVIEW_CODES = dict(_ARRAY_CODES, bool="?")
_CTYPES = {"bool": "c_bool", "int8": "c_int8", "uint8": "c_uint8", "int16": "c_int16",
           "int32": "c_int32", "int64": "c_int64", "uint64": "c_uint64", "float32": "c_float",
           "float64": "c_double"}


class NotApplicable(Exception):
    """The provider cannot make this dtype at all (the cell is left out, not failed)."""


@dataclass
class Cell:
    """One exchange: who, which dtype, the measured status, why (empty for ``ok``), a
    condition the status depends on (``note``, e.g. the data's alignment; usually empty) and,
    for a failed exchange, its control without pydlpack (``matrix_control``; else None)."""

    provider: str
    consumer: str
    dtype: str
    status: str
    reason: str = ""
    note: str = ""
    control: dict | None = field(default=None)


# -- the statuses of a cell, and of a provider × consumer pair (its worst cell) ------------------

STATUSES = ["ok", "copy", "readonly_ignored", "unsupported", "fail", "unverified", "wrong"]
SYMBOLS = {"ok": "✓", "copy": "✓c", "readonly_ignored": "⚠", "unsupported": "–", "fail": "✗",
           "unverified": "?", "wrong": "!!"}
LEGEND = {
    "ok": "zero-copy, values read back right",
    "copy": "values right, but the consumer or the provider copied",
    "readonly_ignored": "read-only source shared zero-copy with a result that reports itself "
                        "writable — measured per consumer: NumPy ndarray.flags.writeable, "
                        "memoryview.readonly, array-api-strict's ndarray flags, tvm-ffi's own "
                        "export flags; torch has no read-only tensors; JAX and TensorFlow arrays "
                        "are immutable",
    "unsupported": "the exchange raised, and so does a control without pydlpack: one side "
                   "cannot hold the dtype (the control's error beside pydlpack's)",
    "fail": "the exchange raised (reason below), and no control without pydlpack shows the "
            "dtype unsupported",
    "unverified": "exchanged, but the values could not be read back (why below)",
    "wrong": "values read back and different: a bug",
}
PAIR_SYMBOLS = {"wrong": "!!", "readonly_ignored": "⚠", "unverified": "?", "none": "✗",
                "some": "◐", "copy": "✓c", "ok": "✓", "unsupported": "–"}
PAIR_LEGEND = {
    "ok": "every dtype zero-copy", "copy": "every dtype works, some copied",
    "some": "some dtypes fail", "none": "every dtype fails",
    "unverified": "some values could not be read back", "readonly_ignored":
    "read-only memory handed out writable", "wrong": "wrong values",
    "unsupported": "no dtype both sides hold",
}



def _np_dtype(name: str):
    import numpy as np

    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        ml_dtypes = importlib.import_module("ml_dtypes")
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _expected(name: str) -> list:
    """The 6 values every provider holds, as plain Python numbers."""
    if name == "bool":
        return [bool(v % 2) for v in VALUES]
    if name.startswith("complex"):
        return [complex(v) for v in VALUES]
    if name.startswith(("float", "bfloat")):
        return [float(v) for v in VALUES]
    return list(VALUES)


def _reference(name: str):
    """The values as a NumPy array whose data starts on an ALIGNMENT-byte boundary (a view of
    a larger buffer: malloc's placement of small arrays varies from run to run)."""
    import numpy as np

    values = np.array(_expected(name), dtype=_np_dtype(name))
    raw = np.empty(values.nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    placed = raw[start:start + values.nbytes].view(values.dtype)
    placed[...] = values
    return placed


def _need(lib: str):
    return importlib.import_module(lib)


# -- providers: name -> (module to import, factory(dtype) -> object) -----------------------------

def _p_bytes(name):
    if name != "uint8":
        raise NotApplicable
    return bytes(VALUES)


def _p_bytearray(name):
    if name != "uint8":
        raise NotApplicable
    return bytearray(VALUES)


def _p_array(name):
    import array

    if name not in _ARRAY_CODES:
        raise NotApplicable
    return array.array(_ARRAY_CODES[name], VALUES)


def _p_memoryview(name):
    if name not in _MEMORYVIEW_CODES:
        raise NotApplicable
    if name == "bool":
        return memoryview(bytes(_expected(name))).cast("?")
    import array

    return memoryview(array.array(_ARRAY_CODES[name], VALUES))


def _p_ctypes(name):
    import ctypes

    if name not in _CTYPES:
        raise NotApplicable
    ctype = getattr(ctypes, _CTYPES[name])
    return (ctype * len(VALUES))(*_expected(name))


def _p_numpy(name):
    return _reference(name)


def _p_torch(name):
    torch = _need("torch")
    dtype = getattr(torch, name, None)
    if dtype is None:
        raise NotApplicable
    return torch.tensor([v % 2 for v in VALUES] if name == "bool" else VALUES).to(dtype)


def _jax():
    """JAX with 64-bit types on, so int64/float64 are exchanged rather than narrowed."""
    jax = _need("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _p_jax(name):
    jax = _jax()        # on the host even where JAX's default device is a GPU
    return jax.device_put(_reference(name), jax.devices("cpu")[0])


def _p_jax_gpu(name):
    jax = _jax()
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        raise NotApplicable
    return jax.device_put(_reference(name), gpus[0])


def _p_tensorflow(name):
    tf = _need("tensorflow")
    if not hasattr(tf.dtypes, name if name != "bool" else "bool"):
        raise NotApplicable
    return tf.constant(_reference(name))


def _p_pyarrow(name):
    pa = _need("pyarrow")
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128"):
        raise NotApplicable
    return pa.array(_reference(name))


_NO_ARROW_TYPE = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128")


def _arrow_reference(name):
    """The 6 values as a PyArrow array (its bool is bit-packed, as every Arrow library's is)."""
    pa = _need("pyarrow")
    if name in _NO_ARROW_TYPE:
        raise NotApplicable
    return pa.array(_reference(name))


def _p_pyarrow_chunked(name):
    pa = _need("pyarrow")
    empty = _arrow_reference(name)[:0]
    return pa.chunked_array([empty, _arrow_reference(name), empty])    # __arrow_c_stream__


def _p_polars(name):
    return _need("polars").Series("x", _arrow_reference(name))


def _p_nanoarrow(name):
    return _need("nanoarrow").c_array(_arrow_reference(name))


def _p_arro3(name):
    return _need("arro3.core").Array.from_arrow(_arrow_reference(name))


def _p_pandas(name):
    pd = _need("pandas")
    if not hasattr(pd.Series, "__arrow_c_stream__"):
        raise NotApplicable                         # pandas 2: no Arrow protocol on a Series
    return pd.Series(pd.arrays.ArrowExtensionArray(_arrow_reference(name)))


def _p_duckdb(name):
    duckdb = _need("duckdb")
    if name == "float16":
        raise NotApplicable                         # DuckDB has no half floats
    table = _need("pyarrow").table({"x": _arrow_reference(name)})
    return duckdb.from_arrow(table).select("x")     # a one-column query result


def _p_pillow(name):
    image = _need("PIL.Image")
    if name != "uint8":
        raise NotApplicable
    return image.frombytes("L", (6, 1), bytes(VALUES))


def _p_torch_cuda(name):
    return _p_torch(name).cuda()


def _p_cupy(name):
    cupy = _need("cupy")
    return cupy.asarray(_reference(name))


def _p_numba(name):
    cuda = _need("numba.cuda")
    return cuda.to_device(_reference(name))


PROVIDERS: dict[str, tuple[str, Callable, str]] = {
    "bytes": ("builtins", _p_bytes, "cpu"),
    "bytearray": ("builtins", _p_bytearray, "cpu"),
    "array.array": ("array", _p_array, "cpu"),
    "memoryview": ("builtins", _p_memoryview, "cpu"),
    "ctypes": ("ctypes", _p_ctypes, "cpu"),
    "numpy": ("numpy", _p_numpy, "cpu"),
    "torch": ("torch", _p_torch, "cpu"),
    "jax": ("jax", _p_jax, "cpu"),
    "jax.gpu": ("jax", _p_jax_gpu, "cuda"),
    "tensorflow": ("tensorflow", _p_tensorflow, "cpu"),
    "pyarrow": ("pyarrow", _p_pyarrow, "cpu"),
    "pyarrow.chunked": ("pyarrow", _p_pyarrow_chunked, "cpu"),
    "polars": ("polars", _p_polars, "cpu"),
    "nanoarrow": ("nanoarrow", _p_nanoarrow, "cpu"),
    "arro3": ("arro3.core", _p_arro3, "cpu"),
    "pandas": ("pandas", _p_pandas, "cpu"),
    "duckdb": ("duckdb", _p_duckdb, "cpu"),
    "pillow": ("PIL", _p_pillow, "cpu"),
    "torch.cuda": ("torch", _p_torch_cuda, "cuda"),
    "cupy": ("cupy", _p_cupy, "cuda"),
    "numba": ("numba", _p_numba, "cuda"),
}


# -- consumers: name -> (module, consume(dl) -> result) ------------------------------------------

def _c_numpy(dl):
    return _need("numpy").from_dlpack(dl)


def _c_numpy_asarray(dl):
    return _need("numpy").asarray(dl)


def _c_torch(dl):
    return _need("torch").from_dlpack(dl)


def _c_jax(dl):
    return _jax().numpy.from_dlpack(dl)


def _c_tensorflow(dl):
    return _need("tensorflow").experimental.dlpack.from_dlpack(dl.__dlpack__())


def _c_array_api_strict(dl):
    return _need("array_api_strict").from_dlpack(dl)


def _c_memoryview(dl):
    return memoryview(dl)


def _c_tvm_ffi(dl):
    return _need("tvm_ffi").from_dlpack(dl)


def _c_pyarrow(dl):
    return _need("pyarrow").array(dl)


def _c_polars(dl):
    return _need("polars").Series(dl)


def _c_nanoarrow(dl):
    return _need("nanoarrow").Array(dl)


def _c_arro3(dl):
    return _need("arro3.core").Array.from_arrow(dl)


def _c_cupy(dl):
    return _need("cupy").from_dlpack(dl)


def _c_numba(dl):
    return _need("numba.cuda").as_cuda_array(dl)


CONSUMERS: dict[str, tuple[str, Callable, str]] = {
    "numpy": ("numpy", _c_numpy, "cpu"),
    "numpy.asarray": ("numpy", _c_numpy_asarray, "cpu"),
    "torch": ("torch", _c_torch, "cpu"),
    "jax": ("jax", _c_jax, "cpu"),
    "jax.gpu": ("jax", _c_jax, "cuda"),
    "tensorflow": ("tensorflow", _c_tensorflow, "cpu"),
    "array_api_strict": ("array_api_strict", _c_array_api_strict, "cpu"),
    "memoryview": ("builtins", _c_memoryview, "cpu"),
    "tvm_ffi": ("tvm_ffi", _c_tvm_ffi, "cpu"),
    "pyarrow": ("pyarrow", _c_pyarrow, "cpu"),
    "polars": ("polars", _c_polars, "cpu"),
    "nanoarrow": ("nanoarrow", _c_nanoarrow, "cpu"),
    "arro3": ("arro3.core", _c_arro3, "cpu"),
    "torch.cuda": ("torch", _c_torch, "cuda"),
    "cupy": ("cupy", _c_cupy, "cuda"),
    "numba": ("numba", _c_numba, "cuda"),
}


def _address(result) -> int | None:
    """Where a consumer's result keeps its first element (None when it cannot be told)."""
    try:
        info = todict(asdlpack(result, allow_legacy_readonly=True))
    except Exception:           # e.g. a |V2 ndarray, whose interface still says where it is
        try:
            return int(result.__array_interface__["data"][0])
        except Exception:
            return None
    return info["data"] + info["byte_offset"]


def _writable(result) -> tuple[bool | None, str]:
    """Whether Python code can write through a consumer's result, and how that was measured."""
    if isinstance(result, memoryview):
        return not result.readonly, "memoryview.readonly"
    top = type(result).__module__.split(".")[0]
    if top == "numpy":
        return bool(result.flags.writeable), "ndarray.flags.writeable"
    if top == "torch":
        return True, "torch has no read-only tensors"
    if top in ("jax", "jaxlib", "tensorflow"):
        return False, f"{top} arrays are immutable"
    if top in ("pyarrow", "polars", "nanoarrow", "arro3"):
        return False, "Arrow memory is immutable by contract"
    if top == "array_api_strict":
        return bool(result._array.flags.writeable), "its NumPy array's flags.writeable"
    try:
        flags = todict(result)["flags"]
    except Exception:
        return None, "no way to tell"
    return not flags & FLAG_BITMASK_READ_ONLY, "its own __dlpack__ carries no READ_ONLY flag"


# The ML types as (exponent bits, mantissa bits, bias, whether all-ones exponent is inf/NaN):
# their bit patterns are decoded here, so that reading a result back needs no library and an
# opaque ``|V2`` array (what NumPy makes of them without ml_dtypes) can be checked too.
_MINIFLOATS = {"bfloat16": (8, 7, 127, True), "float8_e4m3fn": (4, 3, 7, False),
               "float8_e5m2": (5, 2, 15, True)}


def _minifloat(bits: int, name: str) -> float:
    """One bfloat16/float8 value from its bit pattern (IEEE-style; e4m3fn has NaN but no inf)."""
    exp_bits, man_bits, bias, ieee = _MINIFLOATS[name]
    sign = -1.0 if bits >> (exp_bits + man_bits) & 1 else 1.0
    exp, man = bits >> man_bits & ((1 << exp_bits) - 1), bits & ((1 << man_bits) - 1)
    top = (1 << exp_bits) - 1
    if ieee and exp == top:
        return sign * float("inf") if man == 0 else float("nan")
    if not ieee and exp == top and man == (1 << man_bits) - 1:
        return float("nan")
    if exp == 0:
        return sign * man / (1 << man_bits) * 2.0 ** (1 - bias)
    return sign * (1 + man / (1 << man_bits)) * 2.0 ** (exp - bias)


def _raw_bytes(result) -> bytes:
    """The elements of a result in C order as bytes: an ndarray's own ``tobytes`` (a ``|V2``
    ndarray speaks no protocol that can carry its type), else gathered through ``asdlpack``."""
    if type(result).__module__ == "numpy" and hasattr(result, "tobytes"):
        return result.tobytes()
    dl = asdlpack(result, allow_legacy_readonly=True)
    if dl.device[0] != DLDeviceType.kDLCPU:
        raise ValueError(f"result is on device {dl.device}, not on the CPU")
    out, size = bytearray(), dl.itemsize
    index = [0] * dl.ndim
    for _ in range(dl.size):
        offset = sum(i * s for i, s in zip(index, dl.strides, strict=True)) * size
        out += ctypes.string_at(dl.data_ptr + offset, size)
        for axis in reversed(range(dl.ndim)):          # next index in C order
            index[axis] += 1
            if index[axis] < dl.shape[axis]:
                break
            index[axis] = 0
    return bytes(out)


def _values(result, name: str) -> list:
    """A consumer's result as a flat list of Python numbers (ML types decoded from their bits).

    Raises when the result cannot be read back: the cell is then "cannot verify", never "wrong".
    """
    if hasattr(result, "copy_to_host"):                       # Numba device array
        result = result.copy_to_host()
    elif type(result).__module__.startswith("cupy"):
        result = result.get()
    elif getattr(result, "is_cuda", False):                   # torch CUDA tensor
        result = result.cpu()
    elif type(result).__module__.startswith("jax") and any(
            d.platform != "cpu" for d in result.devices()):      # JAX array on a GPU
        result = _jax().device_get(result)
    if name in _MINIFLOATS:
        raw = _raw_bytes(result)
        size = 2 if name == "bfloat16" else 1
        if len(raw) != size * len(VALUES):
            raise ValueError(f"result holds {len(raw)} bytes, expected {len(VALUES)} {name} "
                             "values")
        return [_minifloat(int.from_bytes(raw[i:i + size], sys.byteorder), name)
                for i in range(0, len(raw), size)]
    view = memoryview(asdlpack(result, allow_legacy_readonly=True))
    if view.format not in ("?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d",
                           "Zf", "Zd"):
        raise ValueError(f"result has buffer format {view.format!r}, expected {name}")
    item = {"Zf": "ff", "Zd": "dd"}.get(view.format, view.format)
    found = struct.iter_unpack(item, view.tobytes())    # flat, any shape, no NumPy
    return [complex(*x) if len(x) == 2 else x[0] for x in found]


def reason_of(e: BaseException) -> str:
    """An exception as one line: its type and whole message (never cut, whitespace folded)."""
    return f"{type(e).__name__}: {' '.join(str(e).split()) or '(no message)'}"


def _said(e: BaseException, called: str) -> str:
    """A failed cell's reason: the library that raised it and what it said, DLPack type codes
    decoded (matrix_reasons.attributed); called: the module the matrix called."""
    return attributed(e, called, reason_of(e))


LEGACY_CONSUMERS = ("jax", "jax.gpu", "tensorflow")   # call __dlpack__ without max_version


def _legacy_export_copies(dl) -> bool:
    """Whether a legacy (no max_version) export of ``dl`` points at other memory: a copy."""
    try:
        return todict(dl.__dlpack__())["data"] != dl.data_ptr
    except Exception:
        return False


def make(provider: str, name: str):
    """The provider's object for dtype ``name``, its CPU data on an ALIGNMENT-byte boundary
    where the provider lets that be chosen.

    NumPy-backed providers are placed by ``_reference``; where the provider's allocator decides
    (the stdlib's, whose small blocks sit on a fixed lattice), the object is made again, the
    misplaced ones kept alive meanwhile so that each try gets new memory, until its data lands
    on the boundary or 64 tries have shown that it cannot. Consumers that share only aligned
    data (JAX) then give the same cells on every run. Raises NotApplicable when the provider
    cannot make this dtype.
    """
    factory, device = PROVIDERS[provider][1], PROVIDERS[provider][2]
    obj = factory(name)
    if device != "cpu":
        return obj
    misplaced = []
    for _ in range(64):
        try:
            if asdlpack(obj).data_ptr % ALIGNMENT == 0:
                break
        except Exception:
            break                         # the exchange reports what is wrong with it
        misplaced.append(obj)
        obj = factory(name)
    return obj


def alignment_need(consumer: str) -> int | None:
    """The boundary CPU data must start on for ``consumer`` to share it (None: any will do).

    Measured on six float32 in a ctypes buffer, at a 64-byte boundary and at 32, 16 and 8
    bytes past one: the largest boundary whose misses the consumer copies is its need.
    """
    buf = (ctypes.c_float * 48)()
    base = (-ctypes.addressof(buf)) % 64
    raw = memoryview(buf).cast("B")

    def shares(offset: int) -> bool | None:
        dl = asdlpack(raw[base + offset:base + offset + 24].cast("f"))
        try:
            result = CONSUMERS[consumer][1](dl)
        except Exception:
            return None
        return _address(result) == dl.data_ptr

    if shares(0) is not True:
        return None
    for need, offset in ((64, 32), (32, 16), (16, 8)):
        if shares(offset) is False:
            return need
    return None


def _not_run(provider: str, consumer: str, name: str, e: ModuleNotFoundError) -> Cell:
    """A cell that needs a library not installed here: not run, the library named (``reason``);
    ``build`` lists it under ``not_run``, never as a failed or unverified exchange."""
    return Cell(provider, consumer, name, "not_run", e.name or reason_of(e))


def run_cell(provider: str, consumer: str, name: str, need: int | None = None) -> Cell | None:
    """One exchange; None when the provider cannot make this dtype, status ``not_run`` (the
    missing library in ``reason``) when making it or reading it back needs one not installed.

    ``need``: the consumer's ``alignment_need`` (it explains copies of data not placed on it,
    and is noted on zero-copy cells, which depend on the placement).
    """
    try:
        obj = make(provider, name)
    except NotApplicable:
        return None
    except ModuleNotFoundError as e:        # e.g. NumPy's bfloat16 without ml_dtypes: not run
        return _not_run(provider, consumer, name, e)
    except Exception as e:
        return Cell(provider, consumer, name, "fail",
                    "provider: " + _said(e, PROVIDERS[provider][0]), "",
                    {"side": "none", "via": provider, "outcome": "not_run",
                     "reason": "the provider failed to make it: pydlpack was not called"})
    try:
        dl = asdlpack(obj)
        again = asdlpack(obj)
    except Exception as e:
        return Cell(provider, consumer, name, "fail", _said(e, "dlpack"), "",
                    {"side": "provider"})
    try:
        result = CONSUMERS[consumer][1](dl)
    except Exception as e:
        return Cell(provider, consumer, name, "fail", _said(e, CONSUMERS[consumer][0]), "",
                    {"side": "consumer"})
    try:
        got = _values(result, name)
    except ModuleNotFoundError as e:
        return _not_run(provider, consumer, name, e)
    except Exception as e:
        return Cell(provider, consumer, name, "unverified",
                    "cannot read the result back: " + _said(e, CONSUMERS[consumer][0]))
    if got != _expected(name):
        return Cell(provider, consumer, name, "wrong", f"got {got}")
    if again.data_ptr != dl.data_ptr:
        return Cell(provider, consumer, name, "copy",
                    f"the provider copies: two exports of one {provider} object are different "
                    "memory, so nothing of the object is shared")
    if _address(result) != dl.data_ptr:
        why = "consumer copied"
        if dl.readonly and consumer in LEGACY_CONSUMERS and _legacy_export_copies(dl):
            why = ("read-only data to a legacy (unversioned) consumer, which cannot see READ_ONLY: "
                   "pydlpack hands it a private copy; asdlpack(obj, allow_legacy_readonly=True) "
                   "shares the memory instead")
            if need:
                why += f" where it starts on a {need}-byte boundary ({consumer} copies other " \
                       "CPU data, measured)"
        elif need and dl.data_ptr % need:
            why = f"{consumer} copies CPU data that does not start on a {need}-byte boundary " \
                  f"(measured), and {provider}'s allocator put this data on none in 64 tries"
        return Cell(provider, consumer, name, "copy", why)
    note = f"zero-copy because the data starts on a {need}-byte boundary: {consumer} copies " \
        "CPU data that does not (measured)" if need else ""
    if dl.readonly:
        writable, how = _writable(result)
        if writable:
            return Cell(provider, consumer, name, "readonly_ignored",
                        f"read-only source shared with a writable {consumer} result ({how}): "
                        "writing to it changes memory the provider declared immutable", note)
    return Cell(provider, consumer, name, "ok", "", note)


def available(table: dict, wanted: Iterable[str] | None, device: str):
    """The entries of ``table`` usable here, and {name: why not} for the ones that are not."""
    usable, missing = [], {}
    for name, (module, _, kind) in table.items():
        if wanted is not None and name not in wanted:     # [] selects nothing, None all
            continue
        if kind != device:
            if wanted or kind == "cuda":
                missing[name] = f"{kind.upper()} data: run with --device {kind}"
            continue
        try:
            importlib.import_module(module)
        except ImportError as e:
            missing[name] = f"not installed ({e})"
            continue
        except Exception as e:
            missing[name] = f"failed to import: {reason_of(e)}"
            continue
        usable.append(name)
    return usable, missing
