"""Instructions per call of the exchanges pydlpack's own code decides, counted with callgrind.

Timings on a shared machine drift by several percent; instruction counts do not, so a
restructuring of the core (docs/spec.md §1) is compared with them: run this before and after,
``--json before.json``, then ``--compare before.json``. Every process runs the setup and warms
each row's call up; a row is what callgrind counts while one then makes its call N times in a
loop inside operator.call (collection is on only there), divided by N.

    python benchmarks/instructions.py [--torch] [--json out.json] [--compare before.json]

Needs valgrind. A valgrind run of a few seconds per row; ``--torch`` makes each slower.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SETUP = """
import array, pickle, sys
import numpy as np
from dlpack import asdlpack
a = np.arange(12, dtype=np.float32).reshape(3, 4)
b = bytes(48)
aa = array.array('f', range(12))
class AI:
    def __init__(self, a):
        self.__array_interface__ = a.__array_interface__
        self.keep = a
ai = AI(a)
dl = asdlpack(a)
def out_of_band(buffer):
    pass
"""

TORCH_SETUP = """
import torch
torch.set_num_threads(1)     # another thread's spinning would count
t = torch.arange(12, dtype=torch.float32)
dlt = asdlpack(t)
"""

ROWS = {
    "asdlpack(ndarray)": "asdlpack(a)",
    "asdlpack(bytes)": "asdlpack(b)",
    "asdlpack(array.array)": "asdlpack(aa)",
    "asdlpack(__array_interface__ object)": "asdlpack(ai)",
    "asdlpack(DLPack capsule)": "asdlpack(a.__dlpack__())",
    "dl.__dlpack__() dropped": "dl.__dlpack__()",
    "dl.__dlpack__(copy=True) dropped": "dl.__dlpack__(copy=True)",
    "numpy.from_dlpack(dl)": "np.from_dlpack(dl)",
    "memoryview(dl)": "memoryview(dl)",
    "dl.__array_interface__": "dl.__array_interface__",
    "pickle.dumps(dl, 5) out of band": "pickle.dumps(dl, 5, buffer_callback=out_of_band)",
}

TORCH_ROWS = {
    "asdlpack(torch tensor)": "asdlpack(t)",
    "torch.from_dlpack(dl)": "torch.from_dlpack(dlt)",
}

WARM = 200
N = 2000


def collected(code: str, env: dict[str, str]) -> int:
    """Instructions callgrind counts inside operator.call in a fresh interpreter running
    ``code`` (which makes that one call): the calls counted and nothing else — not the imports,
    the warm-up, another thread's start nor the interpreter's teardown, which vary with what ran
    by more than the calls cost."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
             "--toggle-collect=_operator_call*", sys.executable, "-c",
             code + "\nimport os\nos._exit(0)\n"],
            capture_output=True, text=True, env=env, check=True)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"callgrind printed no total:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def warm_up(setup: str, stmts: list[str]) -> str:
    """The setup, then every row's statement WARM times: each process starts with this. The
    collector is off from here: a collection of the whole heap (torch's included) falling
    inside one row's window and not another's would outweigh the calls counted."""
    warm = "".join(f"\nfor _ in range({WARM}):\n    {s}\n" for s in stmts)
    return setup + warm + "\nimport gc\ngc.collect()\ngc.disable()\n"


def per_call(start: str, stmt: str, env: dict[str, str]) -> float:
    """Instructions per call of stmt, made N times in a loop inside operator.call (the loop's
    own few instructions per round included, alike in every tree)."""
    loop = f"for _ in range({N}):\n    {stmt}\n"
    return collected(f"{start}\nimport operator\noperator.call(exec, {loop!r})\n", env) / N


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="store_true", help="add the torch rows")
    parser.add_argument("--json", help="write the counts to this file")
    parser.add_argument("--compare", help="a file --json wrote earlier: print the ratios")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing to count", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    groups = [(SETUP, ROWS)]      # torch's rows apart: importing it moves the others' counts
    if args.torch:
        groups.append((SETUP + TORCH_SETUP, TORCH_ROWS))
    before = {}
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
    counts = {}
    for setup, rows in groups:
        start = warm_up(setup, list(rows.values()))
        for label, stmt in rows.items():
            counts[label] = n = per_call(start, stmt, env)
            old = before.get(label)
            ratio = f"  {n / old:5.3f}× of {old:9.0f}" if old else ""
            print(f"{label:40} {n:9.0f} instructions{ratio}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(counts, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
