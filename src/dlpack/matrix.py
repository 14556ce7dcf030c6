"""The interoperability matrix: every installed provider × consumer × dtype through ``asdlpack``.

Each cell is one real exchange on a 6-element array: ``ok`` (zero-copy, right values),
``copy`` (right values, but the consumer copied), ``fail`` (with the one-line reason) or
``wrong`` (values differ: a bug somewhere).
"""

from __future__ import annotations

import argparse
import importlib
import json
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import dlpack
from dlpack import asdlpack, todict

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
    provider: str
    consumer: str
    dtype: str
    status: str
    reason: str = ""


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
    import numpy as np

    return np.array(_expected(name), dtype=_np_dtype(name))


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
    return _jax().numpy.asarray(_reference(name))


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
    "tensorflow": ("tensorflow", _p_tensorflow, "cpu"),
    "pyarrow": ("pyarrow", _p_pyarrow, "cpu"),
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


def _c_cupy(dl):
    return _need("cupy").from_dlpack(dl)


def _c_numba(dl):
    return _need("numba.cuda").as_cuda_array(dl)


CONSUMERS: dict[str, tuple[str, Callable, str]] = {
    "numpy": ("numpy", _c_numpy, "cpu"),
    "numpy.asarray": ("numpy", _c_numpy_asarray, "cpu"),
    "torch": ("torch", _c_torch, "cpu"),
    "jax": ("jax", _c_jax, "cpu"),
    "tensorflow": ("tensorflow", _c_tensorflow, "cpu"),
    "array_api_strict": ("array_api_strict", _c_array_api_strict, "cpu"),
    "memoryview": ("builtins", _c_memoryview, "cpu"),
    "tvm_ffi": ("tvm_ffi", _c_tvm_ffi, "cpu"),
    "torch.cuda": ("torch", _c_torch, "cuda"),
    "cupy": ("cupy", _c_cupy, "cuda"),
    "numba": ("numba", _c_numba, "cuda"),
}


def _address(result) -> int | None:
    try:
        info = todict(asdlpack(result, allow_legacy_readonly=True))
    except Exception:
        return None
    return info["data"] + info["byte_offset"]


def _values(result, name: str) -> list:
    """A consumer's result as a flat list of Python numbers (ML types through ml_dtypes)."""
    if hasattr(result, "copy_to_host"):                       # Numba device array
        result = result.copy_to_host()
    elif type(result).__module__.startswith("cupy"):
        result = result.get()
    elif getattr(result, "is_cuda", False):                   # torch CUDA tensor
        result = result.cpu()
    dl = asdlpack(result, allow_legacy_readonly=True)
    try:
        view = memoryview(dl)
        item = {"Zf": "ff", "Zd": "dd"}.get(view.format, view.format)
        found = struct.iter_unpack(item, view.tobytes())    # flat, any shape, no NumPy
        return [complex(*x) if len(x) == 2 else x[0] for x in found]
    except BufferError:
        import numpy as np

        raw = np.asarray(dl).view(_np_dtype(name))
        return raw.reshape(-1).astype(np.float64).tolist()


def _shorten(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:157] + '...' if len(text) > 160 else text}"


def run_cell(provider: str, consumer: str, name: str) -> Cell | None:
    """One exchange; None when the provider cannot make this dtype."""
    try:
        obj = PROVIDERS[provider][1](name)
    except NotApplicable:
        return None
    except Exception as e:
        return Cell(provider, consumer, name, "fail", "provider: " + _shorten(e))
    legacy = consumer in ("jax", "tensorflow")
    try:
        dl = asdlpack(obj, allow_legacy_readonly=legacy and provider in ("jax", "tensorflow"))
        result = CONSUMERS[consumer][1](dl)
    except Exception as e:
        return Cell(provider, consumer, name, "fail", _shorten(e))
    try:
        got = _values(result, name)
    except Exception as e:
        return Cell(provider, consumer, name, "wrong", "cannot read result: " + _shorten(e))
    if got != _expected(name):
        return Cell(provider, consumer, name, "wrong", f"got {got}")
    if _address(result) == dl.data_ptr:
        return Cell(provider, consumer, name, "ok")
    why = "consumer copied"
    if consumer == "jax" and dl.data_ptr % 64:
        why = "JAX copies CPU data that is not 64-byte aligned"
    return Cell(provider, consumer, name, "copy", why)


def _available(table: dict, wanted: Iterable[str] | None, device: str):
    usable, missing = [], {}
    for name, (module, _, kind) in table.items():
        if wanted and name not in wanted:
            continue
        if kind != device:
            continue
        try:
            importlib.import_module(module)
        except ImportError as e:
            missing[name] = f"not installed ({e})"
            continue
        except Exception as e:
            missing[name] = f"failed to import: {_shorten(e)}"
            continue
        usable.append(name)
    return usable, missing


def build(providers=None, consumers=None, dtypes=None, device="cpu", progress=None) -> dict:
    """Run the matrix; returns a JSON-ready dict of cells and unavailable libraries."""
    p_names, p_missing = _available(PROVIDERS, providers, device)
    c_names, c_missing = _available(CONSUMERS, consumers, device)
    names = [d for d in DTYPES if not dtypes or d in dtypes]
    todo = [(p, c, d) for p in p_names for c in c_names for d in names]
    cells = []
    for i, (p, c, d) in enumerate(todo):
        if progress:
            progress(i, len(todo), p, c, d)
        cell = run_cell(p, c, d)
        if cell is not None:
            cells.append(cell)
    if progress:
        progress(len(todo), len(todo), "", "", "")
    return {
        "version": dlpack.__version__,
        "device": device,
        "providers": p_names,
        "consumers": c_names,
        "dtypes": names,
        "unavailable": {f"provider {k}": v for k, v in p_missing.items()}
        | {f"consumer {k}": v for k, v in c_missing.items()},
        "cells": [asdict(c) for c in cells],
    }


SYMBOLS = {"ok": "✓", "copy": "✓c", "fail": "✗", "wrong": "!!"}


def _grid(result: dict):
    """Rows 'provider → consumer', one column per dtype, plus numbered reasons."""
    cells = {(c["provider"], c["consumer"], c["dtype"]): c for c in result["cells"]}
    reasons: dict[str, int] = {}
    rows = []
    for p in result.get("providers", []):
        for c in result.get("consumers", []):
            row = []
            for d in result.get("dtypes", []):
                cell = cells.get((p, c, d))
                if cell is None:
                    row.append("")
                    continue
                mark = SYMBOLS[cell["status"]]
                if cell["reason"]:
                    n = reasons.setdefault(cell["reason"], len(reasons) + 1)
                    mark += str(n)
                row.append(mark)
            if any(row):
                rows.append((f"{p} → {c}", row))
    return rows, reasons


def _counts(result: dict) -> str:
    counts = {s: 0 for s in SYMBOLS}
    for c in result["cells"]:
        counts[c["status"]] += 1
    return (f"{counts['ok']} zero-copy ✓, {counts['copy']} copied ✓c, "
            f"{counts['fail']} failed ✗, {counts['wrong']} wrong values !!")


def render_text(result: dict) -> str:
    rows, reasons = _grid(result)
    dtypes = result.get("dtypes", [])
    width = max([len(r[0]) for r in rows] + [8])
    cols = [max(len(d), 4) for d in dtypes]
    out = [f"pydlpack {result['version']} interoperability matrix ({result.get('device', 'cpu')})",
           "✓ zero-copy, right values   ✓c right values, copied   ✗ failed   !! wrong values",
           "",
           " " * width + " " + " ".join(d.rjust(w) for d, w in zip(dtypes, cols, strict=True))]
    for label, row in rows:
        out.append(label.ljust(width) + " " + " ".join(m.rjust(w) for m, w in
                                                         zip(row, cols, strict=True)))
    out += ["", _counts(result), ""]
    out += [f"{n:>3}. {reason}" for reason, n in reasons.items()]
    for name, why in result["unavailable"].items():
        out.append(f"unavailable: {name}: {why}")
    return "\n".join(out)


def render_markdown(result: dict) -> str:
    rows, reasons = _grid(result)
    dtypes = result.get("dtypes", [])
    out = [f"### pydlpack {result['version']} interoperability matrix "
           f"({result.get('device', 'cpu')})", "",
           "✓ zero-copy with right values · ✓c right values but copied · ✗ failed "
           "(numbered reason below)", "",
           "| provider → consumer | " + " | ".join(dtypes) + " |",
           "|---|" + "---|" * len(dtypes)]
    out += ["| " + label + " | " + " | ".join(row) + " |" for label, row in rows]
    out += ["", _counts(result), ""]
    out += [f"{n}. {reason.replace('|', '/')}" for reason, n in reasons.items()]
    if result["unavailable"]:
        out += [""] + [f"- unavailable: {k}: {v}" for k, v in result["unavailable"].items()]
    return "\n".join(out) + "\n"


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlpack",
        description="Which installed library can hand which dtype to which other library, "
                    "zero-copy, through pydlpack's asdlpack().")
    parser.add_argument("--version", action="version", version=f"pydlpack {dlpack.__version__}")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="machine-readable output")
    form.add_argument("--markdown", action="store_true", help="a Markdown table, for docs")
    parser.add_argument("--dtype", action="append", help="only these dtypes (comma-separated)")
    parser.add_argument("--provider", action="append", help="only these providers")
    parser.add_argument("--consumer", action="append", help="only these consumers")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: exchange GPU arrays (CuPy, Numba, PyTorch CUDA)")
    args = parser.parse_args(argv)
    for flag, allowed in (("dtype", DTYPES), ("provider", PROVIDERS), ("consumer", CONSUMERS)):
        unknown = set(_split(getattr(args, flag)) or ()) - set(allowed)
        if unknown:
            parser.error(f"unknown --{flag} {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(allowed)}")
    progress = None
    if sys.stderr.isatty() and not args.json:
        start = time.monotonic()

        def progress(i, n, p, c, d):
            end = "\n" if i == n else ""
            sys.stderr.write(f"\r\x1b[K[{i}/{n}] {time.monotonic() - start:4.1f}s {p} → {c} "
                             f"{d}{end}")
            sys.stderr.flush()

    result = build(_split(args.provider), _split(args.consumer), _split(args.dtype),
                   args.device, progress)
    if args.json:
        print(json.dumps(result, indent=1))
    elif args.markdown:
        print(render_markdown(result))
    else:
        print(render_text(result))
    return 0
