"""The interoperability matrix: every installed provider × consumer × dtype through ``asdlpack``.

Each cell is one real exchange of a 6-element array, graded by what was measured: ``ok``
(zero-copy, values read back right), ``copy`` (right values, but the consumer or the provider
copied), ``readonly_ignored`` (zero-copy of read-only memory into a result that reports itself
writable), ``fail`` (with the reason), ``unverified`` (exchanged, but the values could not be read
back, with why) or ``wrong`` (values read and different: a bug). The JSON schema is in
docs/matrix.md.

Same machine, same libraries, same cells: each provider's CPU data is placed on a 64-byte
boundary (made again until it is), and a consumer that shares only aligned data (measured once
per run) has that said in its cells' ``note``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # before TensorFlow is imported: no C++ logs

import ctypes
import importlib
import importlib.metadata
import json
import platform
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import dlpack
from dlpack import DLDeviceType, asdlpack, todict
from dlpack._types import FLAG_BITMASK_READ_ONLY
from dlpack.tools._cli import EXIT_USAGE, JsonArgumentParser, quiet_native_stderr, terminal_width
from dlpack.tools._cli import wrap as _wrap
from dlpack.tools.matrix_reasons import grouped_places

SCHEMA = "pydlpack-matrix/1"
ALIGNMENT = 64          # where providers' CPU data is placed (JAX shares only such data)
EXIT_NO_DEVICE = 3

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
    """One exchange: who, which dtype, the measured status, why (empty for ``ok``) and a
    condition the status depends on (``note``, e.g. the data's alignment; usually empty)."""

    provider: str
    consumer: str
    dtype: str
    status: str
    reason: str = ""
    note: str = ""


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


# -- providers: name -> (module to import, factory(dtype) -> object) ---------------------------

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


# -- consumers: name -> (module, consume(dl) -> result) -----------------------------------------

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


def _reason(e: BaseException) -> str:
    """An exception as one line: its type and whole message (never cut, whitespace folded)."""
    return f"{type(e).__name__}: {' '.join(str(e).split()) or '(no message)'}"


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
    return Cell(provider, consumer, name, "not_run", e.name or _reason(e))


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
        return Cell(provider, consumer, name, "fail", "provider: " + _reason(e))
    try:
        dl = asdlpack(obj)
        again = asdlpack(obj)
        result = CONSUMERS[consumer][1](dl)
    except Exception as e:
        return Cell(provider, consumer, name, "fail", _reason(e))
    try:
        got = _values(result, name)
    except ModuleNotFoundError as e:
        return _not_run(provider, consumer, name, e)
    except Exception as e:
        return Cell(provider, consumer, name, "unverified",
                    "cannot read the result back: " + _reason(e))
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
                   "pydlpack hands it a private copy")
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


def _available(table: dict, wanted: Iterable[str] | None, device: str):
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
            missing[name] = f"failed to import: {_reason(e)}"
            continue
        usable.append(name)
    return usable, missing


# -- the environment header ----------------------------------------------------------------------

LIBRARIES = {       # header label -> (module, distribution names to try)
    "numpy": ("numpy", ["numpy"]),
    "torch": ("torch", ["torch"]),
    "jax": ("jax", ["jax"]),
    "jaxlib": ("jaxlib", ["jaxlib"]),
    "tensorflow": ("tensorflow", ["tensorflow", "tensorflow-cpu"]),
    "pyarrow": ("pyarrow", ["pyarrow"]),
    "polars": ("polars", ["polars"]),
    "nanoarrow": ("nanoarrow", ["nanoarrow"]),
    "arro3": ("arro3.core", ["arro3-core"]),
    "pandas": ("pandas", ["pandas"]),
    "duckdb": ("duckdb", ["duckdb"]),
    "pillow": ("PIL", ["pillow"]),
    "ml_dtypes": ("ml_dtypes", ["ml_dtypes"]),
    "array_api_strict": ("array_api_strict", ["array-api-strict"]),
    "tvm_ffi": ("tvm_ffi", ["apache-tvm-ffi"]),
    "cupy": ("cupy", ["cupy", "cupy-cuda12x", "cupy-cuda11x", "cupy-cuda13x"]),
    "numba": ("numba", ["numba"]),
    "numba-cuda": ("numba_cuda", ["numba-cuda"]),
}


def _library_versions() -> dict[str, str]:
    """Installed version of every library the matrix knows (the package metadata, no import)."""
    found = {}
    for label, (_, dists) in LIBRARIES.items():
        for dist in dists:
            try:
                found[label] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return found


class NoCuda(Exception):
    """No usable CUDA driver or GPU here; the message says which."""


def cuda_info() -> dict:
    """Driver version and the GPUs' names, asked of the CUDA driver (libcuda) directly."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise NoCuda(f"the CUDA driver (libcuda.so.1) cannot be loaded: {e}") from None
    if lib.cuInit(0) != 0:
        raise NoCuda("the CUDA driver is installed but does not initialise (cuInit failed)")
    version, count = ctypes.c_int(), ctypes.c_int()
    lib.cuDriverGetVersion(ctypes.byref(version))
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise NoCuda("the CUDA driver is installed but sees no GPU")
    names = []
    for i in range(count.value):
        device, name = ctypes.c_int(), ctypes.create_string_buffer(256)
        lib.cuDeviceGet(ctypes.byref(device), i)
        lib.cuDeviceGetName(name, len(name), device)
        names.append(name.value.decode(errors="replace"))
    v = version.value
    return {"driver": f"{v // 1000}.{v % 1000 // 10}", "gpus": names}


def header(device: str, cuda: dict | None = None) -> dict:
    """What a bug report needs: pydlpack, Python, platform, library versions, (CUDA) driver."""
    return {
        "pydlpack": dlpack.__version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "device": device,
        "libraries": _library_versions(),
        "cuda": cuda,
    }


# -- running and grading -------------------------------------------------------------------------

STATUSES = ["ok", "copy", "readonly_ignored", "fail", "unverified", "wrong"]
SYMBOLS = {"ok": "✓", "copy": "✓c", "readonly_ignored": "⚠", "fail": "✗", "unverified": "?",
           "wrong": "!!"}
LEGEND = {
    "ok": "zero-copy, values read back right",
    "copy": "values right, but the consumer or the provider copied",
    "readonly_ignored": "read-only source shared zero-copy with a result that reports itself "
                        "writable — measured per consumer: NumPy ndarray.flags.writeable, "
                        "memoryview.readonly, array-api-strict's ndarray flags, tvm-ffi's own "
                        "export flags; torch has no read-only tensors; JAX and TensorFlow arrays "
                        "are immutable",
    "fail": "the exchange raised (reason below)",
    "unverified": "exchanged, but the values could not be read back (why below)",
    "wrong": "values read back and different: a bug",
}
PAIR_SYMBOLS = {"wrong": "!!", "readonly_ignored": "⚠", "unverified": "?", "none": "✗",
                "some": "◐", "copy": "✓c", "ok": "✓"}
PAIR_LEGEND = {
    "ok": "every dtype zero-copy", "copy": "every dtype works, some copied",
    "some": "some dtypes fail", "none": "every dtype fails",
    "unverified": "some values could not be read back", "readonly_ignored":
    "read-only memory handed out writable", "wrong": "wrong values",
}


def _pair_verdict(counts: dict[str, int]) -> str:
    """The worst thing that happened between two libraries, for the summary."""
    for status in ("wrong", "readonly_ignored", "unverified"):
        if counts[status]:
            return status
    if counts["fail"]:
        return "some" if counts["ok"] + counts["copy"] else "none"
    return "copy" if counts["copy"] else "ok"


def _pairs(cells: list[Cell], providers: list[str], consumers: list[str]) -> list[dict]:
    """Per provider × consumer: how many dtypes ended in each status, and the verdict."""
    out = []
    for p in providers:
        for c in consumers:
            mine = [x for x in cells if x.provider == p and x.consumer == c]
            if not mine:
                continue
            counts = {s: sum(x.status == s for x in mine) for s in STATUSES}
            out.append({"provider": p, "consumer": c, "verdict": _pair_verdict(counts),
                        "dtypes": len(mine), "counts": counts})
    return out


def build(providers=None, consumers=None, dtypes=None, device="cpu", progress=None,
          cuda: dict | None = None) -> dict:
    """Run the matrix; returns the JSON-ready result (schema in docs/matrix.md)."""
    with quiet_native_stderr():
        return _build(providers, consumers, dtypes, device, progress, cuda)


def _build(providers, consumers, dtypes, device, progress, cuda) -> dict:
    p_names, p_missing = _available(PROVIDERS, providers, device)
    c_names, c_missing = _available(CONSUMERS, consumers, device)
    names = [d for d in DTYPES if dtypes is None or d in dtypes]
    todo = [(p, c, d) for p in p_names for c in c_names for d in names]
    needs = {c: alignment_need(c) if device == "cpu" and todo else None for c in c_names}
    cells, not_run = [], []
    for i, (p, c, d) in enumerate(todo):
        if progress:
            progress(i, len(todo), p, c, d)
        cell = run_cell(p, c, d, needs[c])
        if cell is not None and cell.status == "not_run":
            not_run.append({"provider": p, "consumer": c, "dtype": d, "library": cell.reason})
        elif cell is not None:
            cells.append(cell)
    if progress:
        progress(len(todo), len(todo), "", "", "")
    wrong = any(c.status == "wrong" for c in cells)
    return {
        "schema": SCHEMA,
        "header": header(device, cuda),
        "providers": p_names,
        "consumers": c_names,
        "dtypes": names,
        "unavailable": [{"role": "provider", "name": k, "reason": v} for k, v in p_missing.items()]
        + [{"role": "consumer", "name": k, "reason": v} for k, v in c_missing.items()],
        "pairs": _pairs(cells, p_names, c_names),
        "cells": [asdict(c) for c in cells],
        "not_run": not_run,
        "exit_status": 1 if wrong else 0,
    }


# -- rendering -----------------------------------------------------------------------------------

SHORT = {"numpy.asarray": "np.asarray", "tensorflow": "tf", "array_api_strict": "xp_strict",
         "memoryview": "memview", "torch.cuda": "torch.cuda"}


def _table(corner: str, labels: list[str], heads: list[str], rows: list[list[str]],
           width: int) -> list[str]:
    """Right-aligned columns under ``heads``, as many blocks of them as ``width`` needs (each
    block repeats the label column; a row empty in a block is left out of it)."""
    label = max(len(x) for x in [corner, *labels])
    cols = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    blocks: list[list[int]] = [[]]
    used = label
    for i, w in enumerate(cols):
        if blocks[-1] and used + 1 + w > width:
            blocks.append([])
            used = label
        blocks[-1].append(i)
        used += 1 + w
    out: list[str] = []
    for block in blocks:
        if out:
            out.append("")
        out.append(corner.ljust(label) + "".join(" " + heads[i].rjust(cols[i]) for i in block))
        out += [name.ljust(label) + "".join(" " + row[i].rjust(cols[i]) for i in block)
                for name, row in zip(labels, rows, strict=True) if any(row[i] for i in block)]
    return [line.rstrip() for line in out]


def _header_lines(h: dict, width: int) -> list[str]:
    """The header as text: versions first, wrapped to ``width``."""
    lines = _wrap(f"pydlpack {h['pydlpack']} · {h['implementation']} {h['python']} · "
                  f"{h['platform']} · device {h['device']}", width, "  ", "")
    if h["cuda"]:
        lines += _wrap(f"CUDA driver {h['cuda']['driver']} · GPU {', '.join(h['cuda']['gpus'])}",
                       width, "  ", "")
    libs = ", ".join(f"{k} {v}" for k, v in h["libraries"].items()) or "none"
    return lines + _wrap("libraries: " + libs, width, "  ", "")


def _explained(cell: dict) -> str:
    """What a cell's footnote says: its reason and its note ("" for a plain ok)."""
    return "; ".join(x for x in (cell["reason"], cell.get("note", "")) if x)


def _notes(result: dict, verbose: bool = False) -> list[tuple[str, str, list[str]]]:
    """(status, explanation, [where]) for every cell with one, grouped by explanation; where
    is said once by rows and columns (``grouped_places``), or pair by pair when ``verbose``."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for c in result["cells"]:
        text = _explained(c)
        if text:
            groups.setdefault((c["status"], text), []).append(c)
    order = {s: i for i, s in enumerate(reversed(STATUSES))}
    return [(status, text, _pair_by_pair(cells) if verbose else grouped_places(result, cells))
            for (status, text), cells in sorted(groups.items(), key=lambda g: order[g[0][0]])]


def _pair_by_pair(cells: list[dict]) -> list[str]:
    """"provider → consumer (dtypes)" for each pair of ``cells``, in their order."""
    where: dict[str, list[str]] = {}
    for c in cells:
        where.setdefault(f"{c['provider']} → {c['consumer']}", []).append(c["dtype"])
    return [f"{pair} ({', '.join(ds)})" for pair, ds in where.items()]


def _unavailable(result: dict) -> list[str]:
    """One line per reason: which providers and consumers did not run, and why."""
    groups: dict[str, dict[str, list[str]]] = {}
    for u in result["unavailable"]:
        groups.setdefault(u["reason"], {}).setdefault(u["role"] + "s", []).append(u["name"])
    out = []
    for reason, who in groups.items():
        names = "; ".join(role + " " + ", ".join(n) for role, n in who.items())
        out.append(f"not run: {names} — {reason}")
    return out


def _not_run_lines(result: dict) -> list[str]:
    """One line per missing library: the cells it would run, by provider and dtypes."""
    groups: dict[str, dict[tuple[str, tuple[str, ...]], list[str]]] = {}
    by_pair: dict[tuple[str, str, str], list[str]] = {}
    for x in result.get("not_run", []):
        by_pair.setdefault((x["library"], x["provider"], x["consumer"]), []).append(x["dtype"])
    for (library, p, c), ds in by_pair.items():
        groups.setdefault(library, {}).setdefault((p, tuple(ds)), []).append(c)
    out = []
    for library, where in groups.items():
        count = sum(len(ds) * len(cs) for (_, ds), cs in where.items())
        parts: list[str] = []
        for (p, ds), cs in where.items():
            whom = "every consumer" if cs == result["consumers"] else \
                ", ".join(SHORT.get(c, c) for c in cs)
            parts.append(f"{p} → {whom} ({', '.join(ds)})")
        out.append(f"not run: {count} cells, which need {library} (not installed; "
                   f"pip install {library} runs them) — {'; '.join(parts)}")
    return out


def _totals(result: dict) -> str:
    """How many cells ended in each status."""
    counts = {s: sum(c["status"] == s for c in result["cells"]) for s in STATUSES}
    return ", ".join(f"{counts[s]} {SYMBOLS[s]} {s}" for s in STATUSES)


def _summary_rows(result: dict) -> tuple[list[str], list[str], list[list[str]]]:
    """Provider labels 'name (dtypes it makes)', short consumer heads, cells 'verdict worked'."""
    pairs = {(x["provider"], x["consumer"]): x for x in result["pairs"]}
    labels, rows = [], []
    for p in result["providers"]:
        row, made = [], 0
        for c in result["consumers"]:
            x = pairs.get((p, c))
            if x is None:
                row.append("")
                continue
            n = x["counts"]
            made = x["dtypes"]
            worked = n["ok"] + n["copy"] + n["readonly_ignored"]
            row.append(f"{PAIR_SYMBOLS[x['verdict']]} {worked}")
        labels.append(f"{p} ({made})")
        rows.append(row)
    return labels, [SHORT.get(c, c) for c in result["consumers"]], rows


def _grid_rows(result: dict) -> tuple[list[str], list[str], list[list[str]], dict[str, int]]:
    """Labels 'provider → consumer', the dtypes that have a cell, marks, numbered footnotes."""
    cells = {(c["provider"], c["consumer"], c["dtype"]): c for c in result["cells"]}
    dtypes = [d for d in result["dtypes"] if any(c["dtype"] == d for c in result["cells"])]
    notes: dict[str, int] = {}
    labels, rows = [], []
    for p in result["providers"]:
        for c in result["consumers"]:
            row = []
            for d in dtypes:
                cell = cells.get((p, c, d))
                if cell is None:
                    row.append("")
                    continue
                mark = SYMBOLS[cell["status"]]
                text = _explained(cell)
                if text:
                    mark += str(notes.setdefault(text, len(notes) + 1))
                row.append(mark)
            if any(row):
                labels.append(f"{p} → {SHORT.get(c, c)}")
                rows.append(row)
    return labels, dtypes, rows, notes


def _short_names(result: dict) -> str:
    short = [f"{v} = {k}" for k, v in SHORT.items() if k in result["consumers"] and k != v]
    return "(" + ", ".join(short) + ")" if short else ""


SUMMARY_LEGEND = ("; n = dtypes that worked, (m) = dtypes the provider makes; --grid shows "
                  "each dtype")


def render_text(result: dict, grid: bool = False, width: int | None = None,
                verbose: bool = False) -> str:
    """The terminal view: header, summary (or the per-dtype grid), footnotes, what did not run;
    every line fits ``width`` (the terminal's) unless one word is longer. Each reason is said
    once with where it holds by rows and columns; ``verbose``: pair by pair."""
    width = width or terminal_width()
    out = [*_header_lines(result["header"], width), ""]
    if grid:
        labels, dtypes, rows, notes = _grid_rows(result)
        out += _wrap("   ".join(f"{SYMBOLS[s]} {LEGEND[s]}" for s in STATUSES), width)
        out += ["", *_table("provider → consumer", labels, dtypes, rows, width)]
        out += _wrap(_short_names(result), width) if _short_names(result) else []
        out += ["", *_wrap(_totals(result), width), ""]
        for text, n in notes.items():
            out += _wrap(text, width, "      ", f"{n:>4}. ")
    else:
        labels, heads, rows = _summary_rows(result)
        out += _wrap(" · ".join(f"{PAIR_SYMBOLS[k]} {v}" for k, v in PAIR_LEGEND.items())
                     + SUMMARY_LEGEND, width)
        out += ["", *_table("provider (m)", labels, heads, rows, width)]
        out += _wrap(_short_names(result), width) if _short_names(result) else []
        out += ["", *_wrap(_totals(result), width), ""]
        for status, text, where in _notes(result, verbose):
            out += _wrap(f"{SYMBOLS[status]} {text}", width, "    ")
            out += _wrap("in: " + "; ".join(where), width, "      ", "    ")
    if result["unavailable"] or result.get("not_run"):
        out.append("")
        for line in _unavailable(result) + _not_run_lines(result):
            out += _wrap(line, width, "    ")
    return "\n".join(line.rstrip() for line in out)


def render_markdown(result: dict, grid: bool = False, verbose: bool = False) -> str:
    """The same as render_text as Markdown: tables, and the footnotes as a numbered list."""
    h = result["header"]
    out = [f"### pydlpack {h['pydlpack']} interoperability matrix ({h['device']})", "",
           f"{h['implementation']} {h['python']} · {h['platform']}"
           + (f" · CUDA driver {h['cuda']['driver']} · {', '.join(h['cuda']['gpus'])}"
              if h["cuda"] else ""), "",
           "Libraries: " + (", ".join(f"{k} {v}" for k, v in h["libraries"].items()) or "none"),
           ""]
    if grid:
        labels, dtypes, rows, notes = _grid_rows(result)
        out += [" · ".join(f"{SYMBOLS[s]} {LEGEND[s]}" for s in STATUSES), "",
                "| provider → consumer | " + " | ".join(dtypes) + " |",
                "|---|" + "---|" * len(dtypes)]
        out += ["| " + label + " | " + " | ".join(row) + " |"
                for label, row in zip(labels, rows, strict=True)]
        out += ["", _short_names(result), "", _totals(result), ""]
        out += [f"{n}. {text.replace('|', '/')}" for text, n in notes.items()]
    else:
        labels, heads, rows = _summary_rows(result)
        out += [" · ".join(f"{PAIR_SYMBOLS[k]} {v}" for k, v in PAIR_LEGEND.items())
                + SUMMARY_LEGEND, "",
                "| provider (m) ↓ consumer → | " + " | ".join(heads) + " |",
                "|---|" + "---|" * len(heads)]
        out += ["| " + label + " | " + " | ".join(row) + " |"
                for label, row in zip(labels, rows, strict=True)]
        out += ["", _short_names(result), "", _totals(result), ""]
        for n, (status, text, where) in enumerate(_notes(result, verbose), 1):
            out.append(f"{n}. {SYMBOLS[status]} {text.replace('|', '/')} — in: "
                       + "; ".join(where))
    if result["unavailable"] or result.get("not_run"):
        out += ["", *[f"- {line}" for line in _unavailable(result) + _not_run_lines(result)]]
    return "\n".join(line.rstrip() for line in out) + "\n"


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _names(table: dict, device: str | None = None) -> str:
    return ", ".join(n for n, entry in table.items() if device is None or entry[2] == device)


def _epilog(width: int) -> str:
    """--help's list of names, statuses and exit statuses, wrapped to ``width``."""
    out: list[str] = []
    for title, table in (("providers", PROVIDERS), ("consumers", CONSUMERS)):
        out += _wrap(f"{title}: {_names(table, 'cpu')}; with --device cuda: "
                     f"{_names(table, 'cuda')}", width, "    ", "")
    out += _wrap("dtypes: " + ", ".join(DTYPES), width, "    ", "")
    out += ["", "cells (--grid; --json's \"status\"):"]
    for s in STATUSES:
        out += _wrap(LEGEND[s], width, " " * 22, f"  {SYMBOLS[s]:<2} {s:<16} ")
    out += ["", "summary, a provider × consumer pair's worst cell:"]
    for k, v in PAIR_LEGEND.items():
        out += _wrap(v, width, " " * 22, f"  {PAIR_SYMBOLS[k]:<2} {k:<16} ")
    out += [""]
    out += _wrap("exit status: 0 ran, no wrong values; 1 a cell has wrong values, or the run "
                 "failed; 2 usage error, or the filters select nothing that can run here (the "
                 "names that can are listed); 3 the --device asked for is not here", width,
                 "    ", "")
    out += ["", "python -m dlpack check MODULE:FACTORY [...] [--json]",
            "python -m dlpack check --consumer MODULE:CALLABLE [...] [--json]"]
    out += _wrap("grade a library's DLPack producer (FACTORY() returns an array), or its "
                 "from_dlpack (CALLABLE), rule by rule (python -m dlpack check --help); every "
                 "library's results: docs/check.md", width, "    ", "    ")
    return "\n".join(out)


def _runnable(device: str, providers: list[str] | None, dtypes: list[str] | None) -> str:
    """The names that can run here, for the error of filters that select nothing."""
    p_here, _ = _available(PROVIDERS, None, device)
    c_here, _ = _available(CONSUMERS, None, device)
    made = []
    for p in providers or p_here:
        if p in p_here:
            with quiet_native_stderr():
                kinds = []
                for d in DTYPES:
                    try:
                        PROVIDERS[p][1](d)
                    except (NotApplicable, ModuleNotFoundError):
                        continue
                    except Exception:
                        pass
                    kinds.append(d)
            made.append(f"{p}: {', '.join(kinds)}")
    lines = [f"providers here: {', '.join(p_here) or 'none'}",
             f"consumers here: {', '.join(c_here) or 'none'}"]
    if made and (providers or dtypes):
        lines.append("dtypes the " + ("selected " if providers else "") + "providers make — "
                     + "; ".join(made))
    return "\n".join(lines)


def _empty(device: str, cuda: dict | None, error: str, status: int) -> dict:
    """A result in the JSON schema for a run that could not start, with the reason."""
    return {"schema": SCHEMA, "header": header(device, cuda), "providers": [], "consumers": [],
            "dtypes": [], "unavailable": [], "pairs": [], "cells": [], "not_run": [],
            "error": error,
            "exit_status": status}


def main(argv: list[str] | None = None) -> int:
    """``python -m dlpack``: exit status 1 when a cell has wrong values or the run failed, 2 on
    usage errors and filters that select nothing, 3 when the device asked for is not here."""
    width = terminal_width()
    parser = JsonArgumentParser(
        SCHEMA, "Which installed library can hand which dtype to which other library, "
        "zero-copy, through pydlpack's asdlpack(). `python -m dlpack check MODULE:FACTORY` "
        "grades a producer's DLPack implementation instead, `python -m dlpack check --consumer "
        "MODULE:CALLABLE` a consumer's (docs/check.md).", width,
        prog="python -m dlpack", epilog=_epilog(width))
    parser.add_argument("--version", action="version", version=f"pydlpack {dlpack.__version__}")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true",
                      help="machine-readable output (schema in docs/matrix.md); always JSON, "
                           "errors included")
    form.add_argument("--markdown", action="store_true", help="Markdown tables, for docs")
    parser.add_argument("--html", metavar="FILE",
                        help="write one self-contained page (the same data as --json) to "
                             "FILE; - for standard output")
    parser.add_argument("--grid", action="store_true",
                        help="one column per dtype instead of the provider × consumer summary")
    parser.add_argument("--verbose", action="store_true",
                        help="list each reason's cells pair by pair, not by rows and columns")
    parser.add_argument("--dtype", action="append", help="only these dtypes (comma-separated)")
    parser.add_argument("--provider", action="append", help="only these providers")
    parser.add_argument("--consumer", action="append", help="only these consumers")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: exchange GPU arrays (CuPy, Numba, PyTorch CUDA); exit "
                             "status 3 where there is no GPU")
    args = parser.parse_args(argv)
    for flag, allowed in (("dtype", DTYPES), ("provider", PROVIDERS), ("consumer", CONSUMERS)):
        given = getattr(args, flag)
        if given and not _split(given):         # "--dtype ,": a filter that names nothing
            parser.error(f"--{flag} {','.join(given)!r} names no {flag}; "
                         f"choose from {', '.join(allowed)}")
        unknown = set(_split(given) or ()) - set(allowed)
        if unknown:
            parser.error(f"unknown --{flag} {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(allowed)}")
    if args.html and (args.json or args.markdown):
        parser.error(f"argument --html: not allowed with argument "
                     f"{'--json' if args.json else '--markdown'}")
    if args.html and args.html != "-" and _unwritable(args.html):
        parser.error(f"--html {args.html!r}: cannot write the page: {_unwritable(args.html)}")
    cuda = None
    if args.device == "cuda":
        try:
            cuda = cuda_info()
        except NoCuda as e:
            error = f"--device cuda: no CUDA device here ({e}); nothing was run"
            if args.json:
                print(json.dumps(_empty("cuda", None, error, EXIT_NO_DEVICE), indent=1,
                                 ensure_ascii=False))
            print("\n".join(_wrap(f"python -m dlpack: {error}", width, "  ", "")),
                  file=sys.stderr)
            return EXIT_NO_DEVICE
    progress = None
    if sys.stderr.isatty() and not args.json:
        start = time.monotonic()

        def progress(i, n, p, c, d):
            end = "\n" if i == n else ""
            line = f"[{i}/{n}] {time.monotonic() - start:4.1f}s {p} → {c} {d}"
            sys.stderr.write(f"\r\x1b[K{line[:width - 1]}{end}")
            sys.stderr.flush()

    try:
        result = build(_split(args.provider), _split(args.consumer), _split(args.dtype),
                       args.device, progress, cuda)
    except Exception as e:
        error = f"the matrix run itself failed: {_reason(e)}"
        if args.json:
            print(json.dumps(_empty(args.device, cuda, error, 1), indent=1, ensure_ascii=False))
        print("\n".join(_wrap(f"python -m dlpack: {error}", width, "  ", "")), file=sys.stderr)
        return 1
    if not result["cells"]:
        filtered = args.provider or args.consumer or args.dtype
        error = "the filters select nothing that can run here" if filtered else \
            f"nothing installed can run with --device {args.device}"
        names = _runnable(args.device, _split(args.provider), _split(args.dtype))
        result["error"] = f"{error}. " + names.replace("\n", ". ")
        result["exit_status"] = EXIT_USAGE
        if args.json:
            print(json.dumps(result, indent=1, ensure_ascii=False))
        print("\n".join(_wrap(f"python -m dlpack: {error}", width, "  ", "")), file=sys.stderr)
        for line in [*names.splitlines(), *_unavailable(result), *_not_run_lines(result)]:
            print("\n".join(_wrap(line, width, "    ", "  ")), file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(result, indent=1, ensure_ascii=False))
    elif args.html:
        return _write_html(result, args.html, width)
    elif args.markdown:
        print(render_markdown(result, args.grid, args.verbose))
    else:
        print(render_text(result, args.grid, width, args.verbose))
    return result["exit_status"]


def _unwritable(path: str) -> str:
    """Why no file can be written at ``path`` ("" when one can), checked before the run."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "it is a folder; name a file"
    if not os.path.isdir(folder):
        return f"its folder {folder} does not exist"
    return "" if os.access(folder, os.W_OK) else f"its folder {folder} is not writable"


def _write_html(result: dict, path: str, width: int) -> int:
    """--html: the page to ``path`` (``-``: standard output); the run's exit status, or 1 when
    the file cannot be written."""
    from dlpack.tools.matrix_html import render_html  # it imports this module

    page = render_html(result)
    if path == "-":
        sys.stdout.write(page)
        return result["exit_status"]
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        print("\n".join(_wrap(f"python -m dlpack: --html: {_reason(e)}", width, "  ", "")),
              file=sys.stderr)
        return 1
    print("\n".join(_wrap(f"python -m dlpack: wrote {path} ({len(result['cells'])} cells)",
                          width, "  ", "")), file=sys.stderr)
    return result["exit_status"]
