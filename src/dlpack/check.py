"""``python -m dlpack check MODULE:FACTORY``: grade a DLPack producer as its consumers would.

``FACTORY()`` returns an object with ``__dlpack__`` (or a bare capsule). Every rule of the
DLPack ABI and the array API (2023.12) that a consumer relies on is tried on real capsules read
with ``dlpack.ctypes`` and reported pass / fail / n/a with the evidence. The deleter is observed
through a ctypes trampoline written into the managed tensor's ``deleter`` field: a capsule
destructor and a consumer both call the deleter through that field (the DLPack contract), so the
trampoline counts every call, forwarding only the first to the producer's own deleter (a second
call would be a double free in the checker's own process).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # before TensorFlow is imported: no C++ logs

import argparse
import ctypes
import gc
import importlib
import json
import sys
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import dlpack.ctypes as dlc
from dlpack._types import (
    DLPACK_VERSION,
    FLAG_BITMASK_IS_COPIED,
    FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    FLAG_BITMASK_READ_ONLY,
    DLDataTypeCode,
    DLDeviceType,
)
from dlpack.matrix import quiet_native_stderr

SCHEMA = "pydlpack-check/1"
VERSIONED, LEGACY = b"dltensor_versioned", b"dltensor"
USED = {VERSIONED: b"used_dltensor_versioned", LEGACY: b"used_dltensor"}
KNOWN_FLAGS = FLAG_BITMASK_READ_ONLY | FLAG_BITMASK_IS_COPIED | FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
RULES = ["capsule-names", "max-version", "flags", "deleter-unconsumed", "deleter-consumed",
         "strides", "byte-offset-alignment", "device-copy", "stream", "exchange-api"]

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CallDeleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)     # the producer's, with the GIL held
_Trampoline = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@dataclass
class Result:
    """One rule's verdict: ``pass``, ``fail`` or ``n/a``, and what was seen."""

    rule: str
    status: str
    evidence: str


class _Fail(Exception):
    """A rule failed; the message is the evidence."""


class _NA(Exception):
    """The rule does not apply to this producer; the message says why."""


def capsule_name(capsule) -> bytes | None:
    """The capsule's name as bytes (None for an unnamed capsule)."""
    return _api.PyCapsule_GetName(capsule)


def _struct(capsule, name: bytes):
    """The managed tensor a capsule holds, as a ``dlpack.ctypes`` structure (not consumed)."""
    kind = dlc.DLManagedTensorVersioned if name == VERSIONED else dlc.DLManagedTensor
    return kind.from_address(_api.PyCapsule_GetPointer(capsule, name))


def _plausible(t: dlc.DLTensor) -> bool:
    """Whether a DLTensor's header fields hold values a real tensor can have."""
    try:
        DLDeviceType(t.device.device_type)
        DLDataTypeCode(t.dtype.code)
    except ValueError:
        return False
    return 0 <= t.ndim <= 64 and t.dtype.lanes >= 1 and (t.ndim == 0 or bool(t.shape))


def _describe(t: dlc.DLTensor) -> dict:
    """The fields of a DLTensor that two exports of the same array must agree on."""
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = [t.strides[i] for i in range(t.ndim)] if t.strides else None
    if strides is None:                                   # compact row-major
        strides, step = [0] * t.ndim, 1
        for i in reversed(range(t.ndim)):
            strides[i], step = step, step * shape[i]
    return {"address": (t.data or 0) + t.byte_offset, "device": (t.device.device_type,
            t.device.device_id), "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes),
            "shape": shape, "strides": strides}


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

        self._trampoline = _Trampoline(trampoline)
        self.address = address
        field.deleter = ctypes.cast(self._trampoline, type(field.deleter))

    def call_as_consumer(self) -> None:
        """What a consumer does when it is done with the tensor: call the deleter field once."""
        self._trampoline(self.address)


class Checker:
    """Runs every rule against one producer object (or one bare capsule)."""

    def __init__(self, factory: Callable[[], object]) -> None:
        self.factory = factory
        self.obj: Any = factory()
        self.bare = type(self.obj).__name__ == "PyCapsule"
        self.results: list[Result] = []
        self.refusal: BaseException | None = None
        self.legacy_only = False
        self.legacy_refusal: BufferError | None = None
        self._alive: list = []      # capsules whose structs a rule is still reading

    # -- getting capsules --------------------------------------------------------------------

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
        """(name, DLTensor, flags, version) of an unconsumed capsule."""
        self._alive.append(capsule)
        name = capsule_name(capsule)
        if name not in (VERSIONED, LEGACY):
            raise _Fail(f"capsule named {name!r}; consumers look for 'dltensor_versioned' or "
                        "'dltensor' (a 'used_' name means it was handed out already consumed)")
        m = _struct(capsule, name)
        if name == LEGACY:
            self._legacy_struct(capsule)
            return name, m.dl_tensor, 0, None
        if m.version.major != 1 or not _plausible(m.dl_tensor):
            raise _Fail(f"'dltensor_versioned' holds version {m.version.major}."
                        f"{m.version.minor} / an implausible DLTensor: not a "
                        "DLManagedTensorVersioned")
        return name, m.dl_tensor, m.flags, (m.version.major, m.version.minor)

    # -- the rules ----------------------------------------------------------------------------

    def run(self) -> list[Result]:
        """Every rule in RULES order; a rule that raises unexpectedly fails with what it raised."""
        if not self.bare:
            try:
                self.obj.__dlpack__(max_version=DLPACK_VERSION)
            except TypeError:
                self.legacy_only = True
            except Exception as e:
                self.refusal = e
        for rule in RULES:
            method = getattr(self, "rule_" + rule.replace("-", "_"))
            self._alive.clear()
            try:
                status, evidence = "pass", method()
            except _Fail as e:
                status, evidence = "fail", str(e)
            except _NA as e:
                status, evidence = "n/a", str(e)
            except Exception as e:
                status, evidence = "fail", f"raised {type(e).__name__}: {e}"
            self.results.append(Result(rule, status, " ".join(evidence.split())))
        self._alive.clear()
        return self.results

    def _exportable(self) -> None:
        """Make a rule n/a when the producer refuses this object altogether."""
        if self.refusal is not None and not self.bare:
            raise _NA(f"the producer refuses this object ({type(self.refusal).__name__}: "
                      f"{self.refusal}); only the exchange-api rule applies")

    def _legacy_struct(self, capsule) -> None:
        """Fail when a 'dltensor' capsule does not hold a valid DLManagedTensor."""
        address = _api.PyCapsule_GetPointer(capsule, LEGACY)
        if _plausible(dlc.DLManagedTensor.from_address(address).dl_tensor):
            return
        as_versioned = dlc.DLManagedTensorVersioned.from_address(address)
        if as_versioned.version.major == 1 and _plausible(as_versioned.dl_tensor):
            raise _Fail("'dltensor' holds a DLManagedTensorVersioned (version "
                        f"{as_versioned.version.major}.{as_versioned.version.minor}): a legacy "
                        "consumer would read its version as the data pointer")
        raise _Fail("'dltensor' holds a struct whose device/dtype/ndim are not valid")

    def rule_capsule_names(self) -> str:
        """Capsule names match their structs, for 1.x and legacy consumers alike."""
        self._exportable()
        capsule = self.versioned()
        name, t, _, version = self.read(capsule)
        asked = "a bare capsule" if self.bare else "no keywords (TypeError on max_version)" \
            if self.legacy_only else f"max_version={DLPACK_VERSION}"
        if name == VERSIONED:
            if version[0] != 1 or not _plausible(t):
                raise _Fail(f"'dltensor_versioned' holds version {version} / an implausible "
                            "DLTensor: not a DLManagedTensorVersioned")
            seen = [f"{asked} → 'dltensor_versioned' v{version[0]}.{version[1]}"]
        else:
            self._legacy_struct(capsule)
            seen = [f"{asked} → 'dltensor' (a valid DLManagedTensor"
                    + ("" if self.bare or self.legacy_only else "; allowed, consumers check the "
                       "name, but READ_ONLY cannot travel") + ")"]
        if self.bare or self.legacy_only:
            return "; ".join(seen)
        capsule = self.legacy()
        if capsule is None:
            seen.append(f"no max_version → BufferError ({self.legacy_refusal}): allowed for data "
                        "a legacy capsule cannot describe")
            return "; ".join(seen)
        legacy_name = capsule_name(capsule)
        if legacy_name != LEGACY:
            raise _Fail(f"no max_version gave {legacy_name!r}; a consumer that passes no "
                        "max_version reads only 'dltensor' (array API: it must get a legacy "
                        "capsule)")
        self._legacy_struct(capsule)
        return "; ".join([*seen, "no max_version → 'dltensor' (a valid DLManagedTensor)"])

    def _asking(self, version: tuple[int, int]):
        """``__dlpack__(max_version=version)``; any exception but BufferError is a failure."""
        try:
            return self.export(max_version=version)
        except BufferError:
            raise
        except Exception as e:
            raise _Fail(f"max_version={version} raised {type(e).__name__}: {e}") from None

    def rule_max_version(self) -> str:
        """max_version honoured (no higher major), or the TypeError of a pre-2023.12 producer."""
        if self.bare:
            raise _NA("FACTORY returned a bare capsule: no __dlpack__ to negotiate with")
        if self.legacy_only:
            try:
                self.obj.__dlpack__()
            except Exception as e:
                raise _Fail(f"max_version raises TypeError, and the plain call raises too: "
                            f"{type(e).__name__}: {e}") from None
            return ("max_version raises TypeError (a pre-2023.12 producer): consumers retry "
                    "without keywords and get a legacy capsule, which works")
        self._exportable()
        seen = []
        for asked in ((1, 0), (1, 99), (2, 0)):
            name, _, _, version = self.read(self._asking(asked))
            if name == LEGACY:
                seen.append(f"{asked} → 'dltensor'")
                continue
            if version[0] > asked[0]:
                raise _Fail(f"max_version={asked} gave version {version}")
            seen.append(f"{asked} → v{version[0]}.{version[1]}")
        try:
            name, *_ = self.read(self._asking((0, 8)))
        except _Fail:
            raise
        except BufferError as e:
            return "; ".join(seen) + f"; (0, 8) → BufferError ({e}): allowed for data a legacy " \
                "capsule cannot describe"
        if name != LEGACY:
            raise _Fail(f"max_version=(0, 8) gave {name!r}; major < 1 asks for 'dltensor'")
        return "; ".join(seen) + "; (0, 8) → 'dltensor'"

    def _memory_readonly(self) -> tuple[bool | None, str]:
        """Independent evidence of whether the memory is read-only, and where it came from."""
        obj: Any = self.obj
        interface = getattr(obj, "__array_interface__", None)
        if isinstance(interface, dict) and "data" in interface:
            return bool(interface["data"][1]), "__array_interface__ data[1]"
        try:
            return memoryview(obj).readonly, "memoryview(obj).readonly"
        except TypeError:
            pass
        top = type(obj).__module__.split(".")[0]
        if top in ("jax", "jaxlib", "tensorflow"):
            return True, f"{top} arrays are immutable"
        return None, "no other protocol says whether the memory is writable"

    def rule_flags(self) -> str:
        """Only known flag bits; READ_ONLY on read-only memory; IS_COPIED only on copies."""
        self._exportable()
        name, t, flags, _ = self.read(self.versioned())
        if name == LEGACY:
            readonly, how = (None, "bare capsule") if self.bare else self._memory_readonly()
            state = {True: "read-only", False: "writable", None: "unknown"}[readonly]
            raise _NA("legacy capsules carry no flags (the producer sends only 'dltensor'): "
                      f"consumers cannot be told; the memory: {state} ({how})")
        if flags & ~KNOWN_FLAGS:
            raise _Fail(f"flags {flags:#x} has bits no DLPack version defines")
        address = _describe(t)["address"]
        _, again, _again_flags, _ = self.read(self.versioned())
        same = _describe(again)["address"] == address
        if flags & FLAG_BITMASK_IS_COPIED and same:
            raise _Fail("IS_COPIED set on an export (copy=None) that shares memory with the next "
                        "export: it is not a copy")
        readonly, how = (None, "bare capsule") if self.bare else self._memory_readonly()
        got = bool(flags & FLAG_BITMASK_READ_ONLY)
        if readonly and not got:
            raise _Fail(f"READ_ONLY missing, but the memory is read-only ({how}): consumers "
                        "will write to it")
        note = "READ_ONLY set on writable memory (conservative)" if got and readonly is False \
            else f"READ_ONLY={'set' if got else 'clear'}"
        return f"flags {flags:#x}: {note} ({how}); IS_COPIED clear on shared exports"

    def _deleter_case(self, consumed: bool, versioned: bool) -> str:
        """Drop one capsule (renamed first if ``consumed``) and count its deleter calls."""
        capsule = self.versioned() if versioned else self.legacy()
        if capsule is None:
            return "no max_version: refused with BufferError (nothing to free)"
        name, *_ = self.read(capsule)       # never touch the deleter of an invalid struct
        self._alive.clear()
        address = _api.PyCapsule_GetPointer(capsule, name)
        if consumed:
            _api.PyCapsule_SetName(capsule, USED[name])    # what every consumer does
        probe = DeleterProbe(address, name == VERSIONED)
        if not probe.had_deleter:
            return f"{name.decode()}: NULL deleter (nothing to free)"
        del capsule
        gc.collect()
        by_capsule = probe.calls
        if consumed:
            if by_capsule:
                raise _Fail(f"{name.decode()} renamed to {USED[name].decode()!r} (consumed), yet "
                            "its destructor called the deleter: with the consumer's own call "
                            "that is twice")
            probe.call_as_consumer()
            return f"{name.decode()}: destructor left the consumed tensor alone; " \
                   "consumer's call ran it once"
        if by_capsule == 0:
            raise _NA(f"unconsumed {name.decode()} capsule dropped: no call through its deleter "
                      "field; the destructor frees it some other way (or leaks), which a "
                      "consumer cannot observe")
        if by_capsule != 1:
            raise _Fail(f"unconsumed {name.decode()} capsule dropped: deleter called "
                        f"{by_capsule} times, not once")
        return f"{name.decode()}: dropped unconsumed → deleter called once"

    def _deleter_rule(self, consumed: bool) -> str:
        """The deleter case for the versioned and (unless refused) the legacy capsule."""
        self._exportable()
        cases = [True] if self.legacy_only or self.bare else [True, False]
        return "; ".join(self._deleter_case(consumed, v) for v in cases)

    def rule_deleter_unconsumed(self) -> str:
        """An unconsumed capsule's destructor runs the deleter exactly once."""
        return self._deleter_rule(False)

    def rule_deleter_consumed(self) -> str:
        """A consumed (renamed) capsule's destructor leaves the deleter to the consumer."""
        return self._deleter_rule(True)

    def rule_strides(self) -> str:
        """Strides are non-NULL in capsules of DLPack 1.2 and later."""
        self._exportable()
        _name, t, _, version = self.read(self.versioned())
        if t.ndim == 0:
            raise _NA("0-d tensor: no strides to give")
        if t.strides:
            return f"strides {[t.strides[i] for i in range(t.ndim)]} (non-NULL)"
        if version is not None and version >= (1, 2):
            raise _Fail(f"NULL strides in a v{version[0]}.{version[1]} capsule; DLPack >= 1.2 "
                        "requires them")
        return f"NULL strides, allowed in {'legacy' if version is None else version} capsules"

    def rule_byte_offset_alignment(self) -> str:
        """The first element is aligned to its scalar size; data is non-NULL when needed."""
        self._exportable()
        _, t, _, _ = self.read(self.versioned())
        scalar = t.dtype.bits // (2 if t.dtype.code == DLDataTypeCode.kDLComplex else 1)
        align = max(1, min(scalar // 8, 8))
        first = (t.data or 0) + t.byte_offset
        if not t.data and t.ndim and all(t.shape[i] for i in range(t.ndim)):
            raise _Fail("NULL data pointer on a non-empty tensor")
        if first % align:
            raise _Fail(f"first element at {first:#x} is not {align}-byte aligned")
        return (f"byte_offset {t.byte_offset}; first element {align}-byte aligned; data % 256 = "
                f"{(t.data or 0) % 256}")

    def rule_device_copy(self) -> str:
        """__dlpack_device__, dl_device and copy follow the array API (2023.12)."""
        self._exportable()
        if self.bare or self.legacy_only:
            raise _NA("no dl_device/copy keywords (bare capsule or pre-2023.12 producer)")
        device = tuple(self.obj.__dlpack_device__())
        if len(device) != 2 or not all(isinstance(x, int) for x in device):
            raise _Fail(f"__dlpack_device__() returned {device!r}, not (int, int)")
        device = (int(device[0]), int(device[1]))
        _, t, _, _ = self.read(self.versioned())
        base = _describe(t)
        if base["device"] != device:
            raise _Fail(f"__dlpack_device__() {device} but the capsule says {base['device']}")
        for kwargs in ({"dl_device": device}, {"copy": False}):
            _, t, flags, _ = self.read(self.versioned(**kwargs))
            if _describe(t)["address"] != base["address"] or flags & FLAG_BITMASK_IS_COPIED:
                raise _Fail(f"{kwargs} copied; it must share the memory")
        seen = [f"__dlpack_device__ {device}", "dl_device=same and copy=False share memory"]
        try:
            _, t, flags, _ = self.read(self.versioned(copy=True))
        except BufferError as e:
            seen.append(f"copy=True refused with BufferError ({e})")
        else:
            if _describe(t)["address"] == base["address"]:
                raise _Fail("copy=True returned the same memory")
            seen.append("copy=True gives new memory"
                        + (", IS_COPIED set" if flags & FLAG_BITMASK_IS_COPIED else
                           " (IS_COPIED not set)"))
        elsewhere = (int(DLDeviceType.kDLCUDA if device[0] == DLDeviceType.kDLCPU
                         else DLDeviceType.kDLCPU), 0)
        try:
            self.versioned(dl_device=elsewhere, copy=False)
        except BufferError:
            seen.append(f"dl_device={elsewhere}, copy=False → BufferError")
        except Exception as e:
            raise _Fail(f"dl_device={elsewhere}, copy=False raised {type(e).__name__} "
                        f"({e}); the array API asks for BufferError") from None
        else:
            raise _Fail(f"dl_device={elsewhere}, copy=False did not raise: a device change "
                        "needs a copy")
        return "; ".join(seen)

    def rule_stream(self) -> str:
        """CUDA data: streams None, -1 and 1 accepted, 0 refused (n/a on other devices)."""
        self._exportable()
        if self.bare:
            raise _NA("bare capsule: no __dlpack__ to pass a stream to")
        device = tuple(int(x) for x in self.obj.__dlpack_device__())
        if device[0] != DLDeviceType.kDLCUDA:
            self.read(self.versioned(stream=None))
            raise _NA(f"device {device}: stream is for CUDA data (stream=None accepted)")
        for stream in (None, -1, 1):
            self.read(self.versioned(stream=stream))
        try:
            self.versioned(stream=0)
        except (ValueError, BufferError, RuntimeError) as e:
            return f"None, -1, 1 accepted; 0 refused ({type(e).__name__})"
        raise _Fail("stream=0 accepted; the array API disallows it (ambiguous)")

    def rule_exchange_api(self) -> str:
        """The C exchange API describes the same memory with the same refusals as __dlpack__."""
        api_capsule = None if self.bare else getattr(type(self.obj),
                                                     "__dlpack_c_exchange_api__", None)
        if api_capsule is None:
            raise _NA("no __dlpack_c_exchange_api__ on the type")
        if capsule_name(api_capsule) != b"dlpack_exchange_api":
            raise _Fail(f"__dlpack_c_exchange_api__ is named {capsule_name(api_capsule)!r}, "
                        "not 'dlpack_exchange_api'")
        api = dlc.DLPackExchangeAPI.from_address(_api.PyCapsule_GetPointer(
            api_capsule, b"dlpack_exchange_api"))
        out = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
        try:
            api.managed_tensor_from_py_object_no_sync(self.obj, ctypes.byref(out))
        except Exception as e:
            if self.refusal is not None:
                return (f"refuses as __dlpack__ does: {type(e).__name__} (__dlpack__: "
                        f"{type(self.refusal).__name__})")
            raise _Fail(f"exchange API raised {type(e).__name__} ({e}) on an object "
                        "__dlpack__ exports") from None
        m = out.contents
        fast = _describe(m.dl_tensor)
        fast_flags = m.flags
        DeleterProbe(ctypes.addressof(m), True).call_as_consumer()
        if self.refusal is not None:
            raise _Fail(f"exchange API exported an object __dlpack__ refuses "
                        f"({type(self.refusal).__name__}: {self.refusal})")
        _, t, flags, _ = self.read(self.versioned())
        slow = _describe(t)
        diff = [k for k in slow if slow[k] != fast[k]]
        if (flags ^ fast_flags) & FLAG_BITMASK_READ_ONLY:
            diff.append("READ_ONLY flag")
        if diff:
            raise _Fail("exchange API and __dlpack__ differ in " + ", ".join(
                f"{k}: {fast.get(k)} vs {slow.get(k)}" if k in slow else k for k in diff))
        return (f"v{api.header.version.major}.{api.header.version.minor}: same address, shape, "
                "strides, dtype, device and READ_ONLY as __dlpack__")


def load(spec: str) -> Callable[[], object]:
    """``MODULE:FACTORY`` → the factory."""
    module, sep, factory = spec.partition(":")
    if not sep or not module or not factory:
        raise ValueError(f"{spec!r} is not MODULE:FACTORY (e.g. dlpack._check_factories:numpy)")
    return getattr(importlib.import_module(module), factory)


def check(factory: Callable[[], object]) -> list[Result]:
    """Every rule against the producer ``factory()`` returns (called again for bare capsules);
    an Arrow producer's PyCapsule export is graded too (``dlpack.check_arrow``), and one that
    has no ``__dlpack__`` by those rules alone."""
    from dlpack import check_arrow

    obj = factory()
    arrow = check_arrow.speaks_arrow(obj)
    dlpack = not arrow or hasattr(obj, "__dlpack__") or type(obj).__name__ == "PyCapsule"
    del obj
    return (Checker(factory).run() if dlpack else []) + (
        check_arrow.check(factory) if arrow else [])


def render_text(spec: str, results: list[Result]) -> str:
    """One producer's report: a line per rule, evidence wrapped at 100 columns, never cut."""
    out = [f"python -m dlpack check {spec}"]
    for r in results:
        out += textwrap.wrap(r.evidence, 100, initial_indent=f"  {r.status:<4}  {r.rule:<22} ",
                             subsequent_indent=" " * 30, break_long_words=False)
    fails = sum(r.status == "fail" for r in results)
    out.append(f"  {fails} rule{'s' * (fails != 1)} failed" if fails else "  every rule passed "
               "or does not apply")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m dlpack check``: exit status 1 when a rule fails or the factory cannot run."""
    parser = argparse.ArgumentParser(
        prog="python -m dlpack check",
        description="Grade a DLPack producer: FACTORY() returns an object with __dlpack__ "
                    "(or a capsule); each rule a consumer relies on is reported pass / fail / "
                    "n/a with the evidence.")
    parser.add_argument("factory", nargs="+", metavar="MODULE:FACTORY",
                        help="e.g. dlpack._check_factories:numpy")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output (schema in docs/check.md)")
    args = parser.parse_args(argv)
    reports, status = [], 0
    for spec in args.factory:
        try:
            with quiet_native_stderr():
                results = check(load(spec))
        except Exception as e:
            results = [Result("factory", "fail", f"{type(e).__name__}: {e}")]
        status |= any(r.status == "fail" for r in results)
        reports.append({"factory": spec, "results": [asdict(r) for r in results]})
        if not args.json:
            print(render_text(spec, results))
    if args.json:
        print(json.dumps({"schema": SCHEMA, "reports": reports, "exit_status": status},
                         indent=1, ensure_ascii=False))
    return status


if __name__ == "__main__":
    sys.exit(main())
