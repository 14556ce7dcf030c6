"""pydlpack 0.2.1's names, kept working in 1.x with a DeprecationWarning naming the new spelling.

0.2.1 (the predecessor on PyPI, same import name) was a pure-ctypes package; docs/migration.md
says what changed and why. Everything here goes through the 1.x readers and their checks: a
per-protocol function forces that protocol, ``impl_cls`` chooses the capsule a plain
``__dlpack__()`` call gives. 0.2.1's internals (``MemoryManager``, ``DLManagedTensorImpl``,
``DLStructure``, ``DLPackObject.impl``) handed out raw pointers and are gone.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import Any, ClassVar

import dlpack._capsule_api as _capi
import dlpack.ctypes as _dlc
from dlpack._core import DLPackObject, _asdlpack_via
from dlpack._deprecated import deprecated, missing

DLPACK_CAPSULE_VALID_NAME = b"dltensor"

# PEP 3118 request flags, as 0.2.1's dlpack.buffer spelled them.
PyBUF_SIMPLE = 0
PyBUF_WRITABLE = 0x0001
PyBUF_FORMAT = 0x0004
PyBUF_ND = 0x0008
PyBUF_STRIDES = 0x0010 | PyBUF_ND
PyBUF_INDIRECT = 0x0100 | PyBUF_STRIDES
PyBUF_C_CONTIGUOUS = 0x0020 | PyBUF_STRIDES
PyBUF_F_CONTIGUOUS = 0x0040 | PyBUF_STRIDES
PyBUF_ANY_CONTIGUOUS = 0x0080 | PyBUF_STRIDES
PyBUF_FULL = PyBUF_INDIRECT | PyBUF_WRITABLE | PyBUF_FORMAT
PyBUF_FULL_RO = PyBUF_INDIRECT | PyBUF_FORMAT
PyBUF_RECORDS = PyBUF_STRIDES | PyBUF_WRITABLE | PyBUF_FORMAT
PyBUF_RECORDS_RO = PyBUF_STRIDES | PyBUF_FORMAT
PyBUF_STRIDED = PyBUF_STRIDES | PyBUF_WRITABLE
PyBUF_STRIDED_RO = PyBUF_STRIDES
PyBUF_CONTIG = PyBUF_ND | PyBUF_WRITABLE
PyBUF_CONTIG_RO = PyBUF_ND


def _versioned(impl_cls: object) -> bool:
    if impl_cls is None or impl_cls is _dlc.DLManagedTensor:
        return False
    if impl_cls is _dlc.DLManagedTensorVersioned:
        return True
    raise TypeError(f"impl_cls = {impl_cls!r:.80} is not dlpack.ctypes.DLManagedTensor or "
                    "DLManagedTensorVersioned")


def impl_cls_versioned(impl_cls: object, where: str, stacklevel: int = 3) -> bool:
    """Whether 0.2.1's ``impl_cls`` asks for a versioned capsule from a plain ``__dlpack__()``."""
    versioned = _versioned(impl_cls)
    deprecated(where, "asdlpack(obj): consumers choose the capsule with "
               "__dlpack__(max_version=...), and __dlpack__() alone gives the legacy one",
               stacklevel)
    return versioned


def _via(protocol: str, name: str) -> Callable[..., DLPackObject]:
    def read(obj: object, impl_cls: object = None) -> DLPackObject:
        versioned = _versioned(impl_cls)
        deprecated(f"dlpack.{name}(obj)", "dlpack.asdlpack(obj), which tries every protocol in "
                   "the order of docs/spec.md §3", 3)
        return _asdlpack_via(obj, protocol, versioned)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = (f"pydlpack 0.2.1's asdlpack through {protocol} alone (deprecated); the "
                    "1.x reader and checks, ``impl_cls`` as in 0.2.1.")
    return read


asdlpack_dlpack = _via("__dlpack__", "asdlpack_dlpack")
asdlpack_array_interface_v3 = _via("__array_interface__", "asdlpack_array_interface_v3")
asdlpack_cuda_array_interface = _via("__cuda_array_interface__", "asdlpack_cuda_array_interface")
asdlpack_buffer = _via("buffer protocol", "asdlpack_buffer")


def asdlpack_array_interface_v2(obj: object, impl_cls: object = None) -> DLPackObject:
    """0.2.1's placeholder for ``__array_shape__``/``__array_typestr__``; it always raised."""
    deprecated("dlpack.asdlpack_array_interface_v2(obj)", "dlpack.asdlpack(obj)", 3)
    raise NotImplementedError(f"array interface v2: {type(obj).__name__} objects were never "
                              "supported (nor in 0.2.1); expose __array_interface__ (v3)")


def _get_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-contiguous element strides of ``shape`` (0.2.1's helper, used by its tests)."""
    deprecated("dlpack._get_strides(shape)", "asdlpack(obj).strides", 3)
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class Buffer:
    """0.2.1's view of an object's buffer (deprecated): ``memoryview(obj)`` has its ``ndim``,
    ``shape``, ``strides``, ``itemsize`` and ``format``, ``asdlpack(obj).data_ptr`` its address.
    """

    def __init__(self, obj: object, flags: int = PyBUF_SIMPLE) -> None:
        deprecated("dlpack.Buffer(obj)", "memoryview(obj), and asdlpack(obj).data_ptr for the "
                   "address", 3)
        view = memoryview(obj)              # type: ignore[arg-type]
        if flags & PyBUF_WRITABLE and view.readonly:
            raise BufferError(f"{type(obj).__name__} object's buffer is read-only")
        self._view = view
        self._flags = flags
        self.pointer: int = _asdlpack_via(view, "buffer protocol").data_ptr

    def __getattr__(self, name: str) -> Any:
        """0.2.1's ``py_buffer`` (a ctypes ``Py_buffer``) is gone: its error says where to."""
        raise missing("Buffer", name, self)

    @property
    def ndim(self) -> int:
        return self._view.ndim

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self._view.shape if self._flags & PyBUF_ND else None

    @property
    def strides(self) -> tuple[int, ...] | None:
        return self._view.strides if self._flags & PyBUF_STRIDES == PyBUF_STRIDES else None

    @property
    def suboffsets(self) -> tuple[int, ...] | None:
        return self._view.suboffsets or None

    @property
    def itemsize(self) -> int:
        return self._view.itemsize

    @property
    def format(self) -> str | None:
        return self._view.format if self._flags & PyBUF_FORMAT else None


# -- Capsule: 0.2.1's ctypes wrapper of the PyCapsule C API ---------------------------------------
# A destructor gets the dying capsule's address, never a new reference to it: one would revive
# the capsule in its own dealloc and free it twice.

_NAMES: dict[bytes, bytes] = {}        # a capsule keeps only the char *: names live for good


def _name(name: str | bytes | None) -> bytes | None:
    if name is None:
        return None
    b = str.encode(name) if isinstance(name, str) else bytes(name)
    if type(b) is not bytes:        # the table keeps exact bytes: no subclass's __eq__ or class
        b = bytes(memoryview(b))
    return _NAMES.setdefault(b, b)


def _text(name: bytes | None) -> str | None:
    return None if name is None else name.decode()


class _Dying:
    """What a destructor may ask of the capsule being freed (by address, no reference)."""

    def __init__(self, address: int) -> None:
        self._address = address

    def get_name(self) -> str | None:
        return _text(_capi.RawGetName(self._address))

    def is_valid(self, name: str | bytes | None) -> bool:
        return bool(_capi.RawIsValid(self._address, _name(name)))

    def get_pointer(self, name: str | bytes | None) -> int:
        return _capi.RawGetPointer(self._address, _name(name))  # type: ignore[no-any-return]

    def get_context(self) -> int | None:
        return _capi.RawGetContext(self._address)  # type: ignore[no-any-return]


class Capsule:
    """0.2.1's wrapper of a PyCapsule (deprecated, with no replacement in pydlpack: the C API
    is ``ctypes.pythonapi.PyCapsule_*``)."""

    _destructors: ClassVar[dict[int, Any]] = {}  # C callbacks, until their capsule dies

    def __init__(self, capsule: object) -> None:
        deprecated("dlpack.Capsule(capsule)", "ctypes.pythonapi.PyCapsule_* (pydlpack has no "
                   "capsule wrapper)", 3)
        self._wrap(capsule)

    def _wrap(self, capsule: object) -> None:
        if type(capsule).__name__ != "PyCapsule" or type(capsule).__module__ != "builtins":
            raise TypeError(f"expected a PyCapsule, not {type(capsule).__qualname__}")
        self.capsule = capsule

    @classmethod
    def new(cls, pointer: int, name: str | bytes | None,
            destructor: Callable[[Any], None] | None = None) -> Capsule:
        """A new capsule holding ``pointer`` (not NULL) under ``name``."""
        deprecated("dlpack.Capsule.new(...)", "ctypes.pythonapi.PyCapsule_New", 3)
        self = cls.__new__(cls)
        self._wrap(_capi.New(pointer, _name(name), _capi.Destructor()))
        if destructor is not None:
            self.set_destructor(destructor)
        return self

    def is_valid(self, name: str | bytes | None) -> bool:
        return bool(_capi.IsValid(self.capsule, _name(name)))

    def get_pointer(self, name: str | bytes | None) -> int:
        return _capi.GetPointer(self.capsule, _name(name))  # type: ignore[no-any-return]

    def set_pointer(self, pointer: int) -> None:
        _capi.SetPointer(self.capsule, pointer)

    def get_name(self) -> str | None:
        return _text(_capi.GetName(self.capsule))

    def set_name(self, name: str | bytes | None) -> None:
        _capi.SetName(self.capsule, _name(name))

    def get_context(self) -> int | None:
        return _capi.GetContext(self.capsule)  # type: ignore[no-any-return]

    def set_context(self, context: int | None) -> None:
        _capi.SetContext(self.capsule, context)

    def get_destructor(self) -> Any:
        return _capi.GetDestructor(self.capsule)

    def set_destructor(self, destructor: Callable[[Any], None] | None) -> None:
        """``destructor(capsule)`` runs once when the capsule is freed; it may read the
        capsule's name, pointer and context."""
        key = id(self.capsule)
        if destructor is None or isinstance(destructor, _capi.Destructor):
            Capsule._destructors.pop(key, None)
            _capi.SetDestructor(self.capsule, destructor or _capi.Destructor())
            return

        def run(address: int) -> None:
            try:
                destructor(_Dying(address))
            finally:
                Capsule._destructors.pop(address, None)

        callback = _capi.Destructor(run)
        Capsule._destructors[key] = callback
        _capi.SetDestructor(self.capsule, callback)


_ALIASES = {     # 0.2.1's name -> its 1.x home (same thing, new place)
    "DLTensor": "dlpack.ctypes.DLTensor",
    "DLManagedTensor": "dlpack.ctypes.DLManagedTensor",
    "DLManagedTensorVersioned": "dlpack.ctypes.DLManagedTensorVersioned",
    "DLDevice": "dlpack.ctypes.DLDevice",
    "DLDataType": "dlpack.ctypes.DLDataType",
    "DLPackVersion": "dlpack.ctypes.DLPackVersion",
}
_SHIMS = {       # 0.2.1's name -> the shim here (each warns when used)
    "asdlpack_dlpack": asdlpack_dlpack,
    "asdlpack_array_interface_v3": asdlpack_array_interface_v3,
    "asdlpack_array_interface_v2": asdlpack_array_interface_v2,
    "asdlpack_cuda_array_interface": asdlpack_cuda_array_interface,
    "asdlpack_buffer": asdlpack_buffer,
    "Capsule": Capsule,
    "Buffer": Buffer,
    "_get_strides": _get_strides,
}
def attribute(name: str, frame: FrameType | None = None) -> object:
    """``dlpack.NAME`` for a pydlpack 0.2.1 name (module ``__getattr__``, asked from frame); a
    gone one's error names docs/migration.md (an ImportError in a from-import); AttributeError
    else."""
    if name in _SHIMS:
        return _SHIMS[name]
    if name in _ALIASES:
        deprecated(f"dlpack.{name}", _ALIASES[name], 4)
        return getattr(_dlc, name)
    if name in ("PyBUF_RECORDS_RO", "DLPACK_CAPSULE_VALID_NAME"):
        deprecated(f"dlpack.{name}", "its value" if name[0] == "P" else "b'dltensor'", 4)
        return globals()[name]
    raise missing("dlpack", name, frame=frame)
