"""Write each harness's seed corpus (fuzz/corpus/NAME/) from its seeds(): python fuzz/seeds.py.

The seeds are values run through the harness's own decoding (fuzz/_common.py, Reader), so they
stay meaningful when a harness changes: rerun this and commit the corpus.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESSES = ["fuzz_buffer", "fuzz_typestr", "fuzz_array_interface",
             "fuzz_array_struct", "fuzz_dlpack", "fuzz_arrow", "fuzz_pickle"]


def main() -> None:
    sys.path.insert(0, HERE)
    for name in sys.argv[1:] or HARNESSES:
        out = os.path.join(HERE, "corpus", name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for key, data in importlib.import_module(name).seeds().items():
            with open(os.path.join(out, key), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
