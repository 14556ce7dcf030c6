"""Write each harness's seeds (fuzz/corpus/NAME/) from its seeds(): python fuzz/seeds.py.

The seeds are values run through the harness's own decoding (fuzz/_common.py, Reader), so they
stay meaningful when a harness changes: rerun this and commit the corpus. The other files
there (named by their SHA-1) are inputs fuzzing found, merged in with libFuzzer's -merge=1:
they are kept as they are.
"""

from __future__ import annotations

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESSES = ["fuzz_buffer", "fuzz_typestr", "fuzz_array_interface",
             "fuzz_array_struct", "fuzz_dlpack", "fuzz_arrow", "fuzz_pickle"]


def main() -> None:
    sys.path.insert(0, HERE)
    for name in sys.argv[1:] or HARNESSES:
        out = os.path.join(HERE, "corpus", name)
        os.makedirs(out, exist_ok=True)
        for key, data in importlib.import_module(name).seeds().items():
            with open(os.path.join(out, key), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
