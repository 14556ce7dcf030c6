"""``python -m dlpack check MODULE:FACTORY``: grade a DLPack producer as its consumers would.

``FACTORY()`` returns an object with ``__dlpack__`` (or a bare capsule). Every rule of the
DLPack ABI and the array API (2023.12) that a consumer relies on is tried on real capsules read
with ``dlpack.ctypes`` and reported pass / fail / n/a with the evidence. Rules are functions
registered with ``@RULES.rule`` below, in the order they run, then the Arrow rules of
``check_arrow``; ``basic-export`` comes first and the others need its plain export to have
worked. The grading machinery the consumer checker shares is in ``_grading``, the command line
of both in ``check_cli``.

Each producer is graded in a child process (``_grading.check_isolated``): a producer that
crashes its consumer fails the rule that was running ("the producer crashed a consumer: signal
11") and the next rule resumes in a fresh child, as the hostile corpus does. Inside a child the
checker itself never reads memory the kernel says is unmapped, never calls a NULL entry point,
and disarms the destructors of capsules it finds sharing a tensor.

The deleter is observed through a ctypes trampoline written into the managed tensor's
``deleter`` field: a capsule destructor and a consumer both call the deleter through that field
(the DLPack contract), so the trampoline counts every call, forwarding only the first to the
producer's own deleter (a second call would be a double free in the checker's own process).
"""

from __future__ import annotations

import ctypes
import gc
import operator
import sys
from collections.abc import Callable
from typing import Any

import dlpack._capsule_api as _capi
import dlpack.ctypes as dlc
from dlpack._types import (
    DLPACK_VERSION,
    FLAG_BITMASK_IS_COPIED,
    FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    FLAG_BITMASK_READ_ONLY,
    DLDataTypeCode,
    DLDeviceType,
)
from dlpack.tools import check_arrow
from dlpack.tools._grading import (
    CAPSULE,
    LEGACY,
    NA,
    VERSIONED,
    Fail,
    Registry,
    Result,
    Suite,
    Trampoline,
    capsule_name,
    compact,
    named,
    raised,
    said,
    what,
    worker_main,
)
from dlpack.tools._memory import readable

USED = {VERSIONED: b"used_dltensor_versioned", LEGACY: b"used_dltensor"}
KNOWN_FLAGS = FLAG_BITMASK_READ_ONLY | FLAG_BITMASK_IS_COPIED | FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
_CallDeleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)     # the producer's, with the GIL held


# -- reading capsules without trusting them ------------------------------------------------------

def _disarm(*capsules) -> None:
    """Take the destructor off capsules that share a tensor: it leaks instead of being freed
    twice (and the checker keeps running)."""
    for capsule in capsules:
        _capi.SetDestructor(capsule, _capi.Destructor())    # NULL: none


def _plausible(t: dlc.DLTensor) -> bool:
    """Whether a DLTensor's header fields hold values a real tensor can have."""
    try:
        DLDeviceType(t.device.device_type)
        DLDataTypeCode(t.dtype.code)
    except ValueError:
        return False
    return 0 <= t.ndim <= 64 and t.dtype.lanes >= 1 and (t.ndim == 0 or bool(t.shape))


def _address_of(pointer) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _tensor_readable(t: dlc.DLTensor) -> None:
    """Fail unless the shape and strides arrays a consumer reads are mapped memory."""
    for field in ("shape", "strides"):
        address = _address_of(getattr(t, field))
        if address and not readable(address, 8 * t.ndim):
            raise Fail(f"DLTensor.{field} points at {address:#x}, which is not readable "
                       "memory: a consumer crashes reading it")


def _dtype_name(t: dlc.DLTensor) -> str:
    code = DLDataTypeCode(t.dtype.code).name.removeprefix("kDL").lower()
    lanes = f"x{t.dtype.lanes}" if t.dtype.lanes != 1 else ""
    return f"{code}{t.dtype.bits}{lanes}"


def _describe(t: dlc.DLTensor) -> dict:
    """The fields of a DLTensor that two exports of the same array must agree on."""
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = [t.strides[i] for i in range(t.ndim)] if t.strides else list(compact(shape))
    return {"address": (t.data or 0) + t.byte_offset, "device": (t.device.device_type,
            t.device.device_id), "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes),
            "shape": shape, "strides": strides}


def _struct_at(address: int, name: bytes):
    """The managed tensor at ``address`` under a capsule named ``name``, checked readable."""
    kind = dlc.DLManagedTensorVersioned if name == VERSIONED else dlc.DLManagedTensor
    if not readable(address, ctypes.sizeof(kind)):
        raise Fail(f"capsule {name.decode()!r} points at {address:#x}, which is not readable "
                   "memory: a consumer crashes reading it")
    return kind.from_address(address)


class DeleterProbe:
    """Counts calls of a managed tensor's deleter by swapping a trampoline into its field."""

    def __init__(self, address: int, versioned: bool) -> None:
        kind = dlc.DLManagedTensorVersioned if versioned else dlc.DLManagedTensor
        field = kind.from_address(address)
        original = ctypes.cast(field.deleter, ctypes.c_void_p).value
        self.calls = 0
        self.had_deleter = bool(original)

        def trampoline(ptr):
            self.calls += 1
            if self.calls == 1 and original:
                _CallDeleter(original)(ptr)

        self._trampoline = Trampoline(trampoline)
        self.address = address
        field.deleter = ctypes.cast(self._trampoline, type(field.deleter))

    def call_as_consumer(self) -> None:
        """What a consumer does when it is done with the tensor: call the deleter field once."""
        self._trampoline(self.address)


# -- the producer under test ---------------------------------------------------------------------

class Subject:
    """One producer object (or the factory of bare capsules) and what basic-export learnt."""

    def __init__(self, factory: Callable[[], object]) -> None:
        self.factory = factory
        self.obj: Any = factory()
        self.bare = isinstance(self.obj, CAPSULE)
        self.usable = False          # basic-export passed: the other rules can ask for exports
        self.legacy_only = False     # __dlpack__ takes no max_version (pre-2023.12 producer)
        self.refusal: str | None = None     # what __dlpack__ raised on a plain request
        self.legacy_refusal: BufferError | None = None
        self._alive: list = []       # capsules whose structs a rule is still reading

    def state(self) -> dict:
        """What later rules need from basic-export, for a child that resumes after a crash."""
        return {"usable": self.usable, "legacy_only": self.legacy_only, "refusal": self.refusal}

    def restore(self, state: dict) -> None:
        self.usable = state.get("usable", False)
        self.legacy_only = state.get("legacy_only", False)
        self.refusal = state.get("refusal")

    def export(self, **kwargs):
        """A capsule from ``__dlpack__`` with these keywords (or a new bare capsule)."""
        if self.bare:
            return self.factory()
        return self.obj.__dlpack__(**kwargs)

    def versioned(self, **kwargs):
        """A capsule as a DLPack 1.x consumer asks for it (plain call if legacy-only)."""
        if self.legacy_only:
            return self.export(**{k: v for k, v in kwargs.items() if k == "stream"})
        return self.export(max_version=DLPACK_VERSION, **kwargs)

    def legacy(self):
        """A capsule as a pre-1.0 consumer asks for it; None when refused with BufferError.

        Refusing is right for data a legacy capsule cannot describe (read-only memory).
        """
        try:
            return self.export()
        except BufferError as e:
            self.legacy_refusal = e
            return None

    def read(self, capsule) -> tuple[bytes, dlc.DLTensor, int, Any]:
        """(name, DLTensor, flags, version) of an unconsumed capsule, its memory checked."""
        if not isinstance(capsule, CAPSULE):
            raise Fail(f"__dlpack__ returned {what(capsule)}, not a PyCapsule")
        self._alive.append(capsule)
        name = capsule_name(capsule)
        if name not in (VERSIONED, LEGACY):
            raise Fail(f"capsule named {name!r}; consumers look for 'dltensor_versioned' or "
                       "'dltensor' (a 'used_' name means it was handed out already consumed)")
        m = _struct_at(_capi.GetPointer(capsule, name), name)
        if name == LEGACY:
            self._legacy_struct(capsule)
            _tensor_readable(m.dl_tensor)
            return name, m.dl_tensor, 0, None
        if m.version.major != 1 or not _plausible(m.dl_tensor):
            raise Fail(f"'dltensor_versioned' holds version {m.version.major}."
                       f"{m.version.minor} / an implausible DLTensor: not a "
                       "DLManagedTensorVersioned")
        _tensor_readable(m.dl_tensor)
        return name, m.dl_tensor, m.flags, (m.version.major, m.version.minor)

    def _legacy_struct(self, capsule) -> None:
        """Fail when a 'dltensor' capsule does not hold a valid DLManagedTensor."""
        address = _capi.GetPointer(capsule, LEGACY)
        if _plausible(_struct_at(address, LEGACY).dl_tensor):
            return
        if readable(address, ctypes.sizeof(dlc.DLManagedTensorVersioned)):
            as_versioned = dlc.DLManagedTensorVersioned.from_address(address)
            if as_versioned.version.major == 1 and _plausible(as_versioned.dl_tensor):
                raise Fail("'dltensor' holds a DLManagedTensorVersioned (version "
                           f"{as_versioned.version.major}.{as_versioned.version.minor}): a "
                           "legacy consumer would read its version as the data pointer")
        raise Fail("'dltensor' holds a struct whose device/dtype/ndim are not valid")

    def device(self) -> tuple[int, int]:
        """``__dlpack_device__()`` as consumers read it: two ints, or a failure naming the field."""
        try:
            device = self.obj.__dlpack_device__()
        except Exception as e:
            raise Fail(f"__dlpack_device__() raised {raised(e)}") from None
        if not isinstance(device, (tuple, list)) or len(device) != 2:
            raise Fail(f"__dlpack_device__() returned {what(device)}, not a "
                       "(device_type, device_id) pair of ints")
        for field, value in zip(("device_type", "device_id"), device, strict=True):
            try:
                if isinstance(value, bool):
                    raise TypeError
                operator.index(value)
            except TypeError:
                raise Fail(f"__dlpack_device__() returned {tuple(device)!r}: {field} is "
                           f"{what(value)}, not an int (device_type is a DLDeviceType code, "
                           "e.g. 1 for kDLCPU, 2 for kDLCUDA)") from None
        device_type, device_id = (operator.index(x) for x in device)
        try:
            DLDeviceType(device_type)
        except ValueError:
            raise Fail(f"__dlpack_device__() returned device_type {device_type}, which no "
                       "DLPack version defines") from None
        return device_type, device_id


# -- the rules -----------------------------------------------------------------------------------

RULES = Registry()      # the producer rules, in the order they run; then check_arrow's


@RULES.rule("basic-export", needs_export=False)
def basic_export(s: Subject) -> str:
    """A plain request gives a fresh capsule of its own holding a readable, plausible tensor."""
    if not s.bare and not hasattr(s.obj, "__dlpack__"):
        if check_arrow.speaks_arrow(s.obj):
            raise NA(f"FACTORY() returned {what(s.obj)}, an Arrow producer without "
                     "__dlpack__: the arrow-* rules grade it")
        raise Fail(f"FACTORY() returned {what(s.obj)}: no __dlpack__ and not a capsule, so "
                   "not a DLPack producer")
    if s.bare:
        asked = "FACTORY()"
        first = s.obj
    else:
        asked = f"__dlpack__(max_version={DLPACK_VERSION})"
        try:
            first = s.obj.__dlpack__(max_version=DLPACK_VERSION)
        except TypeError:                   # a pre-2023.12 producer: consumers retry plainly
            s.legacy_only, asked = True, "__dlpack__() (max_version raised TypeError)"
            try:
                first = s.obj.__dlpack__()
            except Exception as e:
                s.refusal = raised(e)
        except Exception as e:
            s.refusal = raised(e)
        if s.refusal is not None:
            raise Fail(f"{asked} raised {s.refusal}: a consumer gets no tensor. FACTORY must "
                       "return an object its producer exports (the exchange-api rule still "
                       "compares the refusal)")
    if not isinstance(first, CAPSULE):
        raise Fail(f"{asked} returned {what(first)}, not a PyCapsule")
    second = s.versioned()
    if second is first:
        _disarm(first)
        raise Fail(f"{asked} returned the same capsule object twice: the first consumer renames "
                   "it 'used_…' and frees the tensor, the second reads freed memory")
    name = capsule_name(first)
    if name not in (VERSIONED, LEGACY):
        s.usable = True
        return f"{asked} → a capsule named {name!r} (capsule-names grades the name)"
    _, t, _, version = s.read(first)
    if isinstance(second, CAPSULE) and capsule_name(second) == name:
        here = _capi.GetPointer(first, name)
        if here == _capi.GetPointer(second, name):
            _disarm(first, second)
            raise Fail(f"two live capsules from {asked} hold the same managed tensor "
                       f"({here:#x}): each consumer calls its deleter, a double free")
    s.usable = True
    held = f"'{name.decode()}'" + (f" v{version[0]}.{version[1]}" if version else "")
    return (f"{asked} → {held}: shape {tuple(t.shape[i] for i in range(t.ndim))}, "
            f"{_dtype_name(t)}, device {(t.device.device_type, t.device.device_id)}; a second "
            "export is a capsule and tensor of its own")


@RULES.rule("capsule-names")
def capsule_names(s: Subject) -> str:
    """Capsule names match their structs, for 1.x and legacy consumers alike."""
    capsule = s.versioned()
    name, _, _, version = s.read(capsule)
    asked = "a bare capsule" if s.bare else "no keywords (TypeError on max_version)" \
        if s.legacy_only else f"max_version={DLPACK_VERSION}"
    if name == VERSIONED:
        seen = [f"{asked} → 'dltensor_versioned' v{version[0]}.{version[1]}"]
    else:
        seen = [f"{asked} → 'dltensor' (a valid DLManagedTensor"
                + ("" if s.bare or s.legacy_only else "; allowed, consumers check the "
                   "name, but READ_ONLY cannot travel") + ")"]
    if s.bare or s.legacy_only:
        return "; ".join(seen)
    capsule = s.legacy()
    if capsule is None:
        seen.append(f"no max_version → BufferError ({s.legacy_refusal}): allowed for data "
                    "a legacy capsule cannot describe")
        return "; ".join(seen)
    if not isinstance(capsule, CAPSULE):
        raise Fail(f"no max_version: __dlpack__() returned {what(capsule)}, not a PyCapsule")
    legacy_name = capsule_name(capsule)
    if legacy_name != LEGACY:
        raise Fail(f"no max_version gave {legacy_name!r}; a consumer that passes no "
                   "max_version reads only 'dltensor' (array API: it must get a legacy "
                   "capsule)")
    s.read(capsule)
    return "; ".join([*seen, "no max_version → 'dltensor' (a valid DLManagedTensor)"])


def _asking(s: Subject, version: tuple[int, int]):
    """``__dlpack__(max_version=version)``; any exception but BufferError is a failure."""
    try:
        return s.export(max_version=version)
    except BufferError:
        raise
    except Exception as e:
        raise Fail(f"max_version={version} raised {raised(e)}") from None


@RULES.rule("max-version")
def max_version(s: Subject) -> str:
    """max_version honoured (no higher major), or the TypeError of a pre-2023.12 producer."""
    if s.bare:
        raise NA("FACTORY returned a bare capsule: no __dlpack__ to negotiate with")
    if s.legacy_only:
        return ("max_version raises TypeError (a pre-2023.12 producer): consumers retry "
                "without keywords and get a legacy capsule, which works")
    seen = []
    for asked in ((1, 0), (1, 99), (2, 0)):
        name, _, _, version = s.read(_asking(s, asked))
        if name == LEGACY:
            seen.append(f"{asked} → 'dltensor'")
            continue
        if version[0] > asked[0]:
            raise Fail(f"max_version={asked} gave version {version}")
        seen.append(f"{asked} → v{version[0]}.{version[1]}")
    try:
        name, *_ = s.read(_asking(s, (0, 8)))
    except BufferError as e:
        return "; ".join(seen) + f"; (0, 8) → BufferError ({said(e)}): allowed for data a legacy " \
            "capsule cannot describe"
    if name != LEGACY:
        raise Fail(f"max_version=(0, 8) gave {name!r}; major < 1 asks for 'dltensor'")
    return "; ".join(seen) + "; (0, 8) → 'dltensor'"


_IMMUTABLE = ("jax", "jaxlib", "tensorflow")


def _memory_readonly(obj: Any) -> tuple[bool | None, str]:
    """Independent evidence of whether the memory is read-only, and where it came from.

    ``__array_interface__['data']`` is a ``(address, read_only)`` pair, a buffer object (whose
    own readonly flag decides), or None (the object's own buffer).
    """
    try:
        interface = getattr(obj, "__array_interface__", None)
    except Exception:
        interface = None
    if isinstance(interface, dict) and "data" in interface:
        data = interface["data"]
        if isinstance(data, tuple) and len(data) == 2:
            return bool(data[1]), "__array_interface__ data[1]"
        source = obj if data is None else data
        try:
            with memoryview(source) as view:
                return view.readonly, (f"__array_interface__ data is {what(source)}, whose "
                                       "buffer is " + ("read-only" if view.readonly else
                                                       "writable"))
        except TypeError:
            pass
    try:
        cuda = getattr(obj, "__cuda_array_interface__", None)
    except Exception:
        cuda = None
    if isinstance(cuda, dict) and isinstance(cuda.get("data"), tuple) and len(cuda["data"]) == 2:
        return bool(cuda["data"][1]), "__cuda_array_interface__ data[1]"
    try:
        with memoryview(obj) as view:
            return view.readonly, "memoryview(obj).readonly"
    except TypeError:
        pass
    top = type(obj).__module__.split(".")[0]
    if top in _IMMUTABLE:
        return True, f"{top} arrays are immutable"
    return None, "no other protocol says whether the memory is writable"


@RULES.rule("flags")
def flags_rule(s: Subject) -> str:
    """Only known flag bits; READ_ONLY on read-only memory; IS_COPIED only on copies."""
    name, t, flags, _ = s.read(s.versioned())
    if name == LEGACY:
        readonly, how = (None, "bare capsule") if s.bare else _memory_readonly(s.obj)
        state = {True: "read-only", False: "writable", None: "unknown"}[readonly]
        raise NA("legacy capsules carry no flags (the producer sends only 'dltensor'): "
                 f"consumers cannot be told; the memory: {state} ({how})")
    if flags & ~KNOWN_FLAGS:
        raise Fail(f"flags {flags:#x} has bits no DLPack version defines")
    address = _describe(t)["address"]
    _, again, _again_flags, _ = s.read(s.versioned())
    same = _describe(again)["address"] == address
    if flags & FLAG_BITMASK_IS_COPIED and same:
        raise Fail("IS_COPIED set on an export (copy=None) that shares memory with the next "
                   "export: it is not a copy")
    readonly, how = (None, "bare capsule") if s.bare else _memory_readonly(s.obj)
    got = bool(flags & FLAG_BITMASK_READ_ONLY)
    if readonly and not got:
        raise Fail(f"READ_ONLY missing, but the memory is read-only ({how}): consumers "
                   "will write to it")
    note = "READ_ONLY set on writable memory (conservative)" if got and readonly is False \
        else f"READ_ONLY={'set' if got else 'clear'}"
    return f"flags {flags:#x}: {note} ({how}); IS_COPIED clear on shared exports"


def _deleter_case(s: Subject, consumed: bool, versioned: bool) -> str:
    """Drop one capsule (renamed first if ``consumed``) and count its deleter calls."""
    capsule = s.versioned() if versioned else s.legacy()
    if capsule is None:
        return "no max_version: refused with BufferError (nothing to free)"
    name, *_ = s.read(capsule)       # never touch the deleter of an invalid struct
    s._alive.clear()
    address = _capi.GetPointer(capsule, name)
    if consumed:
        _capi.SetName(capsule, USED[name])    # what every consumer does
    probe = DeleterProbe(address, name == VERSIONED)
    if not probe.had_deleter:
        return f"{name.decode()}: NULL deleter (nothing to free)"
    del capsule
    gc.collect()
    by_capsule = probe.calls
    if consumed:
        if by_capsule:
            raise Fail(f"{name.decode()} renamed to {USED[name].decode()!r} (consumed), yet "
                       "its destructor called the deleter: with the consumer's own call "
                       "that is twice")
        probe.call_as_consumer()
        return f"{name.decode()}: destructor left the consumed tensor alone; " \
               "consumer's call ran it once"
    if by_capsule == 0:
        raise NA(f"unconsumed {name.decode()} capsule dropped: no call through its deleter "
                 "field; the destructor frees it some other way (or leaks), which a "
                 "consumer cannot observe")
    if by_capsule != 1:
        raise Fail(f"unconsumed {name.decode()} capsule dropped: deleter called "
                   f"{by_capsule} times, not once")
    return f"{name.decode()}: dropped unconsumed → deleter called once"


def _deleter_rule(s: Subject, consumed: bool) -> str:
    """The deleter case for the versioned and (unless refused) the legacy capsule."""
    cases = [True] if s.legacy_only or s.bare else [True, False]
    return "; ".join(_deleter_case(s, consumed, v) for v in cases)


@RULES.rule("deleter-unconsumed")
def deleter_unconsumed(s: Subject) -> str:
    """An unconsumed capsule's destructor runs the deleter exactly once."""
    return _deleter_rule(s, False)


@RULES.rule("deleter-consumed")
def deleter_consumed(s: Subject) -> str:
    """A consumed (renamed) capsule's destructor leaves the deleter to the consumer."""
    return _deleter_rule(s, True)


@RULES.rule("strides")
def strides(s: Subject) -> str:
    """Strides are non-NULL in capsules of DLPack 1.2 and later."""
    _name, t, _, version = s.read(s.versioned())
    if t.ndim == 0:
        raise NA("0-d tensor: no strides to give")
    if t.strides:
        return f"strides {[t.strides[i] for i in range(t.ndim)]} (non-NULL)"
    if version is not None and version >= (1, 2):
        raise Fail(f"NULL strides in a v{version[0]}.{version[1]} capsule; DLPack >= 1.2 "
                   "requires them")
    return f"NULL strides, allowed in {'legacy' if version is None else version} capsules"


@RULES.rule("byte-offset-alignment")
def byte_offset_alignment(s: Subject) -> str:
    """The first element is aligned to its scalar size; data is non-NULL when needed."""
    _, t, _, _ = s.read(s.versioned())
    scalar = t.dtype.bits // (2 if t.dtype.code == DLDataTypeCode.kDLComplex else 1)
    align = max(1, min(scalar // 8, 8))
    first = (t.data or 0) + t.byte_offset
    if not t.data and t.ndim and all(t.shape[i] for i in range(t.ndim)):
        raise Fail("NULL data pointer on a non-empty tensor")
    if first % align:
        raise Fail(f"first element at {first:#x} is not {align}-byte aligned")
    return (f"byte_offset {t.byte_offset}; first element {align}-byte aligned; data % 256 = "
            f"{(t.data or 0) % 256}")


@RULES.rule("device-copy")
def device_copy(s: Subject) -> str:
    """__dlpack_device__, dl_device and copy follow the array API (2023.12)."""
    if s.bare or s.legacy_only:
        raise NA("no dl_device/copy keywords (bare capsule or pre-2023.12 producer)")
    device = s.device()
    _, t, _, _ = s.read(s.versioned())
    base = _describe(t)
    if base["device"] != device:
        raise Fail(f"__dlpack_device__() {device} but the capsule says {base['device']}")
    for kwargs in ({"dl_device": device}, {"copy": False}):
        _, t, flags, _ = s.read(s.versioned(**kwargs))
        if _describe(t)["address"] != base["address"] or flags & FLAG_BITMASK_IS_COPIED:
            raise Fail(f"{kwargs} copied; it must share the memory")
    seen = [f"__dlpack_device__ {device}", "dl_device=same and copy=False share memory"]
    try:
        _, t, flags, _ = s.read(s.versioned(copy=True))
    except BufferError as e:
        seen.append(f"copy=True refused with BufferError ({said(e)})")
    else:
        if _describe(t)["address"] == base["address"]:
            raise Fail("copy=True returned the same memory: the array API asks for a new buffer "
                       "the consumer owns; copy the data (and set IS_COPIED), or raise "
                       "BufferError when the producer cannot copy")
        seen.append("copy=True gives new memory"
                    + (", IS_COPIED set" if flags & FLAG_BITMASK_IS_COPIED else
                       " (IS_COPIED not set)"))
    elsewhere = (int(DLDeviceType.kDLCUDA if device[0] == DLDeviceType.kDLCPU
                     else DLDeviceType.kDLCPU), 0)
    try:
        s.versioned(dl_device=elsewhere, copy=False)
    except BufferError:
        seen.append(f"dl_device={elsewhere}, copy=False → BufferError")
    except Exception as e:
        raise Fail(f"dl_device={elsewhere}, copy=False raised {named(e)} "
                   f"({said(e)}); the array API asks for BufferError") from None
    else:
        raise Fail(f"dl_device={elsewhere}, copy=False did not raise: a device change "
                   "needs a copy")
    return "; ".join(seen)


@RULES.rule("stream")
def stream(s: Subject) -> str:
    """CUDA data: streams None, -1 and 1 accepted, 0 refused (n/a on other devices)."""
    if s.bare:
        raise NA("bare capsule: no __dlpack__ to pass a stream to")
    try:
        device = s.device()
    except Fail:
        if s.legacy_only:                   # device-copy is n/a for it: fail here
            raise
        raise NA("cannot tell whether the data is on a CUDA device: __dlpack_device__() is "
                 "not valid (device-copy fails it)") from None
    if device[0] != DLDeviceType.kDLCUDA:
        s.read(s.versioned(stream=None))
        raise NA(f"device {device}: stream is for CUDA data (stream=None accepted)")
    for value in (None, -1, 1):
        s.read(s.versioned(stream=value))
    try:
        s.versioned(stream=0)
    except (ValueError, BufferError, RuntimeError) as e:
        return f"None, -1, 1 accepted; 0 refused ({named(e)})"
    raise Fail("stream=0 accepted; the array API disallows it (ambiguous)")


_REQUIRED = ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
             "managed_tensor_to_py_object_no_sync", "current_work_stream")   # dlpack.h: not NULL


@RULES.rule("exchange-api", needs_export=False)
def exchange_api(s: Subject) -> str:
    """The C exchange API describes the same memory with the same refusals as __dlpack__."""
    api_capsule = None if s.bare else getattr(type(s.obj), "__dlpack_c_exchange_api__", None)
    if api_capsule is None:
        raise NA("no __dlpack_c_exchange_api__ on the type")
    if not s.usable and s.refusal is None:
        raise NA("not graded: basic-export failed, so there is no __dlpack__ export to compare "
                 "the exchange API with")
    if not isinstance(api_capsule, CAPSULE):
        raise Fail(f"__dlpack_c_exchange_api__ is {what(api_capsule)}, not a PyCapsule")
    if capsule_name(api_capsule) != b"dlpack_exchange_api":
        raise Fail(f"__dlpack_c_exchange_api__ is named {capsule_name(api_capsule)!r}, "
                   "not 'dlpack_exchange_api'")
    where = _capi.GetPointer(api_capsule, b"dlpack_exchange_api")
    if not readable(where, ctypes.sizeof(dlc.DLPackExchangeAPI)):
        raise Fail(f"__dlpack_c_exchange_api__ points at {where:#x}, which is not readable "
                   "memory")
    api = dlc.DLPackExchangeAPI.from_address(where)
    version = (api.header.version.major, api.header.version.minor)
    if version[0] != 1:
        raise Fail(f"DLPackExchangeAPI version {version[0]}.{version[1]}: a 1.x consumer "
                   "cannot read its entry points")
    null = [f for f in _REQUIRED if not _address_of(getattr(api, f))]
    if null:
        raise Fail(f"NULL entry point{'s' * (len(null) > 1)} {', '.join(null)} (dlpack.h: must "
                   "not be NULL): a consumer calling one crashes; nothing was called")
    out = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
    try:
        status = api.managed_tensor_from_py_object_no_sync(s.obj, ctypes.byref(out))
        if status != 0 or not out:
            raise RuntimeError(f"returned {status} with " + ("a tensor" if out else "no tensor"))
    except Exception as e:
        if s.refusal is not None:
            return f"refuses as __dlpack__ does: {named(e)} (__dlpack__: {s.refusal})"
        raise Fail(f"managed_tensor_from_py_object_no_sync raised {named(e)} ({said(e)}) on "
                   "an object __dlpack__ exports") from None
    m = _struct_at(_address_of(out), VERSIONED)
    if m.version.major != 1 or not _plausible(m.dl_tensor):
        raise Fail("managed_tensor_from_py_object_no_sync gave a struct that is not a valid "
                   "DLManagedTensorVersioned (it is leaked, not freed)")
    _tensor_readable(m.dl_tensor)
    fast = _describe(m.dl_tensor)
    fast_flags = m.flags
    DeleterProbe(ctypes.addressof(m), True).call_as_consumer()
    if s.refusal is not None:
        raise Fail(f"exchange API exported an object __dlpack__ refuses ({s.refusal})")
    _, t, flags, _ = s.read(s.versioned())
    slow = _describe(t)
    diff = [k for k in slow if slow[k] != fast[k]]
    if (flags ^ fast_flags) & FLAG_BITMASK_READ_ONLY:
        diff.append("READ_ONLY flag")
    if diff:
        raise Fail("exchange API and __dlpack__ differ in " + ", ".join(
            f"{k}: {fast.get(k)} vs {slow.get(k)}" if k in slow else k for k in diff))
    return (f"v{version[0]}.{version[1]}: same address, shape, strides, dtype, device and "
            "READ_ONLY as __dlpack__")


# -- running the rules ---------------------------------------------------------------------------

PRODUCERS = Suite("dlpack.tools.check", (RULES, check_arrow.RULES), Subject,
                  "the producer crashed a consumer", "importing and calling FACTORY")


def check(factory: Callable[[], object]) -> list[Result]:
    """Every rule against ``factory()``, in this process (``check_isolated`` survives crashes)."""
    s = Subject(factory)
    return [PRODUCERS.grade(s, name) for name in PRODUCERS.rules]


if __name__ == "__main__":
    worker_main(sys.argv[1:], PRODUCERS)
