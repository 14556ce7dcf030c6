"""pydlpack 0.2.1's ``dlpack.buffer`` (deprecated): ``Buffer`` and the ``PyBUF_*`` request flags.

``memoryview(obj)`` gives what a ``Buffer`` did, and ``asdlpack(obj).data_ptr`` the address
(docs/migration.md). Importing this module warns once, at the importing line.
"""

import ctypes
import sys

from dlpack._deprecated import missing
from dlpack._legacy import (  # noqa: F401  (0.2.1's names)
    Buffer,
    PyBUF_ANY_CONTIGUOUS,
    PyBUF_C_CONTIGUOUS,
    PyBUF_CONTIG,
    PyBUF_CONTIG_RO,
    PyBUF_F_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_FULL,
    PyBUF_FULL_RO,
    PyBUF_INDIRECT,
    PyBUF_ND,
    PyBUF_RECORDS,
    PyBUF_RECORDS_RO,
    PyBUF_SIMPLE,
    PyBUF_STRIDED,
    PyBUF_STRIDED_RO,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
    deprecated,
)

Py_ssize_t = ctypes.c_ssize_t

__all__ = ["Buffer"]

deprecated("the module dlpack.buffer", "memoryview(obj), and asdlpack(obj).data_ptr for the "
           "address", 3)     # 3: the import statement (the import machinery's frames skipped)
del deprecated


def __getattr__(name: str) -> object:
    """0.2.1's ``Py_Buffer`` is gone: its error (and a from-import's) names the way out."""
    raise missing("dlpack.buffer", name, frame=sys._getframe(1))
