"""pydlpack's own share of a CUDA exchange, measured on any machine.

The CUDA driver is replaced by a stand-in library (src/dlpack/tests/libcuda_stub.c) loaded
through the real loader, whose entry points return at once. What remains is pydlpack's cost:
reading the interface, the driver calls through their function pointers, the event ordering.
Each row is a ratio against the same exchange of the same dict as CPU data (no driver at all):

    python benchmarks/cuda_stub.py
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from types import SimpleNamespace

from run import compare

from dlpack import _core, asdlpack

ROUNDS, NUMBER = 15, 20000
STUB = os.path.join(os.path.dirname(__file__), "..", "src", "dlpack", "tests", "libcuda_stub.c")


def main() -> int:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        print("skipped: no C compiler for the stand-in driver")
        return 0
    out = os.path.join(tempfile.mkdtemp(), "libcuda_stub.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", out, STUB], check=True)
    _core._cuda_driver(None, path=out)
    memory = (ctypes.c_float * 1024)()
    fields = {"shape": (32, 32), "typestr": "<f4", "data": (ctypes.addressof(memory), False),
              "strides": None, "version": 3}

    cai = SimpleNamespace(__cuda_array_interface__=dict(fields, stream=7))   # CAI only
    ai = SimpleNamespace(__array_interface__=fields)                          # AI only
    cai_dl, ai_dl = asdlpack(cai), asdlpack(ai)
    rows = [
        ("asdlpack(cai_only)", lambda: asdlpack(cai), "asdlpack(ai_only)", lambda: asdlpack(ai)),
        ("dl.__dlpack__(stream=5)  [event wait]",
         lambda: cai_dl.__dlpack__(stream=5, max_version=(1, 0)),
         "dl.__dlpack__()  [CPU]", lambda: ai_dl.__dlpack__(max_version=(1, 0))),
        ("dl.__dlpack__(stream=7)  [same stream]",
         lambda: cai_dl.__dlpack__(stream=7, max_version=(1, 0)),
         "dl.__dlpack__()  [CPU]", lambda: ai_dl.__dlpack__(max_version=(1, 0))),
    ]
    print(f"| {'CUDA exchange (stand-in driver)':40} | {'same on CPU data':24} | ns    | CPU ns "
          "| ratio |")
    print(f"|{'-' * 42}|{'-' * 26}|-------|--------|-------|")
    for label, ours, ref_label, ref in rows:
        x, y, ratio, _ = compare(ours, ref, ROUNDS, NUMBER)
        print(f"| {label:40} | {ref_label:24} | {x:5.0f} | {y:6.0f} | {ratio:5.2f} |")
    _core._cuda_driver(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
