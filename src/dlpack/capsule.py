"""pydlpack 0.2.1's ``dlpack.capsule`` (deprecated): ``Capsule``, a ctypes wrapper of a PyCapsule.

pydlpack has no capsule wrapper any more: the C API is ``ctypes.pythonapi.PyCapsule_*``
(docs/migration.md). Importing this module warns once, at the importing line.
"""

import ctypes

from dlpack._capsule_api import Destructor as PyCapsule_Destructor  # noqa: F401  (0.2.1's name)
from dlpack._legacy import Capsule, deprecated

PyCapsule = ctypes.py_object

__all__ = ["Capsule"]

deprecated("the module dlpack.capsule", "ctypes.pythonapi.PyCapsule_* (pydlpack has no capsule "
           "wrapper)", 3)    # 3: the import statement (the import machinery's frames skipped)
del deprecated
