"""The producers ``python -m dlpack check --consumer`` hands a consumer (spec §12), built with
ctypes: a ``Probe`` of one ``Layout`` (a ``DLManagedTensorVersioned``, or legacy
``DLManagedTensor``, over memory the checker owns, in a capsule whose name, version, flags,
``byte_offset``, strides, dtype and device the layout chooses), with a deleter that counts its
calls and can poison the data; ``LegacyProbe`` (a pre-2023.12 ``__dlpack__``) and
``ExchangeProbe`` (``__dlpack_c_exchange_api__``); and ``seen``, the consumer's array read back
through ``asdlpack``. The rules are check_consumer's.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dlpack._capsule_api as _capi
import dlpack.ctypes as dlc
from dlpack._types import FLAG_BITMASK_READ_ONLY
from dlpack.tools._grading import LEGACY, VERSIONED, Trampoline, capsule_name, compact

PATTERN = 0xA5                      # what a poisoning deleter writes over the data
VALUES = struct.pack("<6f", 0, 1, 2, 3, 4, 5)
# Memory, structs and callbacks handed to consumers, never freed: a consumer that keeps a
# pointer past the deleter reads valid memory, and a deleter or capsule destructor run late (an
# array freed at interpreter exit) still finds its callback (the list itself is never freed).
_KEEP: list = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_KEEP))


def _buffer(payload: bytes) -> int:
    """A 256-byte aligned copy of ``payload`` the checker owns (never freed)."""
    raw = ctypes.create_string_buffer(len(payload) + 256)
    _KEEP.append(raw)
    address = (ctypes.addressof(raw) + 255) & ~255
    ctypes.memmove(address, payload, len(payload))
    return address


@dataclass(frozen=True)
class Layout:
    """One tensor a rule hands out; ``offset`` moves ``data`` itself, ``byte_offset`` does not."""

    payload: bytes = VALUES
    shape: tuple[int, ...] = (2, 3)
    strides: tuple[int, ...] | None = (3, 1)     # in elements; None: NULL
    dtype: tuple[int, int, int] = (2, 32, 1)     # code, bits, lanes
    offset: int = 0
    byte_offset: int = 0
    flags: int = 0
    version: tuple[int, int] | None = (1, 3)     # None: 'dltensor' capsules, whatever is asked
    device: tuple[int, int] = (1, 0)
    ndim: int | None = None                      # a lie about ndim (hostile)
    null_data: bool = False

    @property
    def itemsize(self) -> int:
        return self.dtype[1] * self.dtype[2] // 8

    def expected(self) -> bytes:
        """The bytes, in C order, that a right import holds."""
        return _gather(lambda at, n: self.payload[at:at + n], self.offset + self.byte_offset,
                       self.shape, self.strides or compact(self.shape), self.itemsize)


def _gather(read: Callable[[int, int], bytes], first: int, shape: tuple[int, ...],
            strides: tuple[int, ...], itemsize: int) -> bytes:
    """Every element of a strided view, in C order, read with ``read(address, size)``."""
    return b"".join(read(first + itemsize * sum(i * s for i, s in zip(index, strides,
                                                                      strict=True)), itemsize)
                    for index in itertools.product(*map(range, shape)))


class Probe:
    """A producer of one Layout: records each ``__dlpack__`` call, counts deleter calls."""

    KEYWORDS = frozenset({"stream", "max_version", "dl_device", "copy"})

    def __init__(self, layout: Layout = Layout(), *, poison: bool = False) -> None:
        self.layout = layout
        self.base = _buffer(layout.payload)
        self.first = self.base + layout.offset + layout.byte_offset
        self.calls: list[dict] = []
        self.capsules: list = []     # every capsule handed out, to read its name afterwards
        self.deleted = 0
        self.exchanged = 0           # calls of the exchange API (ExchangeProbe)
        self.poison = poison

        def deleter(_address: int) -> None:
            self.deleted += 1
            if self.poison:
                ctypes.memset(self.base, PATTERN, len(layout.payload))

        self.deleter = Trampoline(deleter)
        _KEEP.append(self.deleter)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.layout.device

    def __dlpack__(self, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        unknown = set(kwargs) - self.KEYWORDS
        if unknown:
            raise TypeError(f"__dlpack__() got unexpected keyword arguments {sorted(unknown)}")
        device = kwargs.get("dl_device")
        if device is not None and tuple(device) != self.layout.device:
            raise BufferError(f"the data is on device {self.layout.device}; this producer does "
                              f"not copy to {tuple(device)}")
        if kwargs.get("copy"):
            raise BufferError("this producer makes no copies")
        asked = kwargs.get("max_version")
        versioned = asked is not None and asked[0] >= 1 and self.layout.version is not None
        if not versioned and self.layout.flags & FLAG_BITMASK_READ_ONLY:
            raise BufferError("read-only data: a legacy 'dltensor' capsule cannot say so")
        return self.capsule(versioned)

    def managed(self, versioned: bool) -> int:
        """A new managed tensor of the layout (kept for the life of the process)."""
        lay = self.layout
        ndim = len(lay.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*lay.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*(lay.strides or ()))
        m = (dlc.DLManagedTensorVersioned if versioned else dlc.DLManagedTensor)()
        t = m.dl_tensor
        t.data = None if lay.null_data else self.base + lay.offset
        t.device = dlc.DLDevice(*lay.device)
        t.ndim = ndim if lay.ndim is None else lay.ndim
        t.dtype = dlc.DLDataType(*lay.dtype)
        t.byte_offset = lay.byte_offset
        if ndim:
            t.shape = shape
            if lay.strides is not None:
                t.strides = strides
        if versioned:
            m.version = dlc.DLPackVersion(*(lay.version or (1, 3)))
            m.flags = lay.flags
        m.deleter = ctypes.cast(self.deleter, type(m.deleter))
        _KEEP.extend([shape, strides, m])
        return ctypes.addressof(m)

    def capsule(self, versioned: bool) -> object:
        name = VERSIONED if versioned else LEGACY
        capsule = _capi.New(self.managed(versioned), name, _DESTRUCTOR)
        self.capsules.append(capsule)
        return capsule

    def names(self) -> list[str]:
        return [(capsule_name(c) or b"").decode() for c in self.capsules]


@_capi.Destructor
def _DESTRUCTOR(capsule: int) -> None:
    """An unconsumed capsule's destructor: call the deleter, as producers do."""
    name = _capi.RawGetName(capsule)
    if name in (VERSIONED, LEGACY):
        kind = dlc.DLManagedTensorVersioned if name == VERSIONED else dlc.DLManagedTensor
        address = _capi.RawGetPointer(capsule, name)
        deleter = ctypes.cast(kind.from_address(address).deleter, ctypes.c_void_p).value
        if deleter:         # NULL: the tensor needs no deleter (the DLPack header allows it)
            Trampoline(deleter)(address)


_KEEP.append(_DESTRUCTOR)


class LegacyProbe(Probe):
    """A pre-2023.12 producer: ``max_version`` (any keyword but ``stream``) is a TypeError."""

    def __dlpack__(self, **kwargs: Any) -> object:
        if set(kwargs) - {"stream"}:
            self.calls.append(kwargs)
            raise TypeError(f"__dlpack__() got an unexpected keyword argument "
                            f"{sorted(set(kwargs) - {'stream'})[0]!r}")
        return super().__dlpack__(**kwargs)


def _from_object(probe: Probe, out: Any) -> int:
    probe.exchanged += 1
    out[0] = ctypes.cast(probe.managed(True), ctypes.POINTER(dlc.DLManagedTensorVersioned))
    return 0


def _dltensor_from_object(probe: Probe, out: Any) -> int:
    probe.exchanged += 1
    m = dlc.DLManagedTensorVersioned.from_address(probe.managed(True))
    ctypes.memmove(out, ctypes.addressof(m.dl_tensor), ctypes.sizeof(dlc.DLTensor))
    return 0


def _no_stream(_device_type: int, _device_id: int, out: Any) -> int:
    out[0] = None
    return 0


def _exchange_api() -> object:
    """A DLPack 1.3 exchange API that exports a probe as its ``__dlpack__`` would."""
    api = dlc.DLPackExchangeAPI()
    api.header.version = dlc.DLPackVersion(1, 3)
    fields = {field[0]: field[1] for field in dlc.DLPackExchangeAPI._fields_}
    for name, function in (("managed_tensor_from_py_object_no_sync", _from_object),
                           ("dltensor_from_py_object_no_sync", _dltensor_from_object),
                           ("current_work_stream", _no_stream),
                           ("managed_tensor_allocator", lambda *args: -1),
                           ("managed_tensor_to_py_object_no_sync", lambda *args: -1)):
        callback = fields[name](function)
        setattr(api, name, callback)
        _KEEP.append(callback)
    _KEEP.append(api)
    return _capi.New(ctypes.addressof(api), b"dlpack_exchange_api", _capi.Destructor())


class ExchangeProbe(Probe):
    """A probe whose type has ``__dlpack_c_exchange_api__`` (DLPack 1.3)."""

    __dlpack_c_exchange_api__ = _exchange_api()


# -- reading the consumer's array back -----------------------------------------------------------

@dataclass
class Seen:
    """The consumer's array as ``asdlpack`` reads it."""

    address: int
    shape: tuple[int, ...]
    dtype: tuple[int, int, int]
    device: tuple[int, int]
    readonly: bool
    data: bytes | None = field(repr=False)     # C order; None off the CPU


def seen(result: object) -> Seen | None:
    """``asdlpack(result)`` (or of ``numpy.asarray(result)``) read; None where neither works."""
    from dlpack import asdlpack

    for view in (lambda r: r, lambda r: __import__("numpy").asarray(r)):
        try:
            o = asdlpack(view(result))
        except Exception:
            continue
        device = (int(o.device[0]), int(o.device[1]))
        count = math.prod(o.shape)
        data = _gather(ctypes.string_at, o.data_ptr, o.shape, o.strides, o.itemsize) \
            if device[0] == 1 and count <= 1 << 16 and (o.data_ptr or not count) else None
        return Seen(o.data_ptr, tuple(o.shape), (int(o.dtype.code), o.dtype.bits, o.dtype.lanes),
                    device, o.readonly, data)
    return None
