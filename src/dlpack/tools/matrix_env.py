"""The environment a matrix run reports (its JSON ``header``): pydlpack, Python, the platform,
every known library's installed version, and, for ``--device cuda``, the CUDA driver and GPUs
as the driver itself says (no library is imported to ask)."""

from __future__ import annotations

import ctypes
import importlib.metadata
import platform

import dlpack

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
