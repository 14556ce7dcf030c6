"""What every harness shares: the errors that may escape, the span a view reaches, and the
checks on it (docs/spec.md §7: only TypeError/BufferError escape; a view never reaches outside
the memory its provider described).

A harness raises ``Finding`` (or lets any other exception escape): atheris then stops, prints
the traceback and writes the input to ``crash-*``, and fuzz/run.sh fails.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import pickle
import sys
import warnings
import weakref

import atheris

with atheris.instrument_imports():
    import dlpack
    import dlpack._types

ALLOWED = (TypeError, BufferError)      # dlpack.CudaError is a BufferError
EXPORT_MAX = 1 << 16        # bytes: larger views (zero strides) are not exported (copies)
VERBOSE = bool(os.environ.get("FUZZ_VERBOSE"))     # print each import's outcome (seeds)


class Finding(AssertionError):
    """A broken promise: a wrong exception, or a view outside the memory described."""


def imported(make):
    """asdlpack(make()) or None when refused as the spec allows; anything else escapes."""
    try:
        dl = dlpack.asdlpack(make())
    except ALLOWED as e:
        if VERBOSE:
            print(f"refused: {type(e).__name__}: {e}"[:300])
        return None
    if VERBOSE:
        print(f"imported: {dl!r} strides {dl.strides}")
    return dl


def span(dl) -> tuple[int, int]:
    """[lo, hi): the bytes dl's elements reach (empty at data_ptr for no elements)."""
    p = dl.data_ptr
    if dl.size == 0:
        return p, p
    bits = dl.dtype.bits * dl.dtype.lanes
    contiguous = True
    step = 1
    for n, s in zip(reversed(dl.shape), reversed(dl.strides), strict=True):
        if n != 1 and s != step:
            contiguous = False
        step *= n
    if bits < 8 and contiguous:            # packed or padded, C-contiguous: nbytes from data
        return p, p + dl.nbytes
    lo = hi = 0
    for n, s in zip(dl.shape, dl.strides, strict=True):
        reach = (n - 1) * s
        lo, hi = lo + min(reach, 0), hi + max(reach, 0)
    return p + lo * dl.itemsize, p + (hi + 1) * dl.itemsize


def check_inside(dl, lo: int, hi: int, what: str) -> None:
    """The view lies within [lo, hi) (an empty view reaches no byte: it may point anywhere)."""
    a, b = span(dl)
    if a != b and not (lo <= a and b <= hi):
        raise Finding(f"view [{a:#x}, {b:#x}) ({dl!r}, strides {dl.strides}) reaches outside "
                      f"{what} [{lo:#x}, {hi:#x}) by {max(lo - a, b - hi)} bytes")


def check_readonly(dl, readonly: bool, why: str) -> None:
    """Memory its provider marked read-only is imported read-only (docs/spec.md §4)."""
    if readonly and not dl.readonly:
        raise Finding(f"{dl!r} is writable, but {why}")


def agree_with_numpy(dl, provider) -> None:
    """Where NumPy reads the same provider, both see one layout: data address, shape, item
    size and the byte strides of dimensions longer than 1 (pydlpack normalises the others,
    docs/spec.md §7). Skipped without NumPy, or where NumPy refuses or copies."""
    try:
        import numpy
    except ImportError:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = numpy.asarray(provider)
    except Exception:       # NumPy's own refusals, of any kind
        return
    if a.dtype.hasobject or a.dtype.fields is not None or a.size == 0 or dl.size == 0:
        return
    ours = (dl.data_ptr, dl.shape, dl.itemsize,
            [s * dl.itemsize for n, s in zip(dl.shape, dl.strides, strict=True) if n > 1])
    theirs = (a.__array_interface__["data"][0], a.shape, a.itemsize,
              [s for n, s in zip(a.shape, a.strides, strict=True) if n > 1])
    if ours != theirs:
        raise Finding(f"pydlpack reads (data, shape, itemsize, strides) {ours}, NumPy {theirs}")


def touch(dl) -> None:
    """Read every byte the view reaches (libc memcpy: AddressSanitizer checks the range), then
    export it every way, each export checked against the view (the writers see the fuzzed
    layouts too). Only for views over the harness's memory: exports read it."""
    a, b = span(dl)
    if b > a:
        ctypes.string_at(a, b - a)
    if dl.nbytes > EXPORT_MAX:
        return
    layout = (dl.shape, dl.strides, dl.dtype.name, dl.data_ptr, dl.device)
    for version in (None, (1, 0)):
        try:
            back = dlpack.asdlpack(dl.__dlpack__(max_version=version))
        except ALLOWED:
            continue
        got, want = (back.shape, back.strides, back.dtype.name, back.data_ptr, back.device), layout
        if version is None and dl.readonly:     # a legacy consumer gets a copy (spec §4)
            got, want = got[0:3:2], want[0:3:2]
        if got != want:
            raise Finding(f"__dlpack__(max_version={version}) of {want} reads back as {got}")
    try:
        memoryview(dl).tobytes()
    except ALLOWED:
        pass
    try:
        dl.__array_interface__  # noqa: B018  (its getter builds the dict)
    except (*ALLOWED, AttributeError):
        pass
    for protocol in (2, 5):
        try:
            back = pickle.loads(pickle.dumps(dl, protocol=protocol))
        except ALLOWED:
            continue
        if (back.shape, back.dtype.name, back.readonly) != (dl.shape, dl.dtype.name,
                                                          dl.readonly):
            raise Finding(f"pickle protocol {protocol} of {layout} reads back as "
                          f"{(back.shape, back.dtype.name, back.readonly)}")


_NAMES: dict[bytes, ctypes.Array] = {}      # capsule names, alive for good (a few)


def capsule(address: int, name: bytes | None):
    """A raw PyCapsule over address, without destructor."""
    import dlpack._capsule_api as capi

    if name is not None and name not in _NAMES:
        _NAMES[name] = ctypes.create_string_buffer(name)
    return capi.New(address, None if name is None else _NAMES[name], capi.Destructor())


@functools.cache
def fuzzbuf():
    """The harnesses' C helper (fuzz/fuzzbuf.c), built by fuzz/run.sh into FUZZBUF_DIR."""
    sys.path.insert(0, os.environ.get("FUZZBUF_DIR", os.path.dirname(__file__)))
    import fuzzbuf as module

    return module


INT64 = (-(1 << 63), (1 << 63) - 1)


class Reader:
    """The fuzzer's bytes as values, front to back: each call takes a fixed number of bytes
    (missing ones read as zero), so a mutation at one place changes one value.

    Made with a ``script`` (the values wanted, in call order), it writes instead: each call
    returns the next value and appends its encoding to ``out`` (that is how fuzz/seeds.py writes
    the seed corpus: the same decoding code, run once forwards).
    """

    def __init__(self, data: bytes = b"", script: list | None = None) -> None:
        self.data, self.pos = data, 0
        self.script, self.out = script, bytearray()

    def int_in(self, low: int, high: int) -> int:
        """An int in [low, high]."""
        n = max(1, ((high - low).bit_length() + 7) // 8)
        if self.script is not None:
            v = self.script.pop(0) if self.script else low
            if not low <= v <= high:
                raise ValueError(f"seed value {v!r} not in [{low}, {high}]")
            self.out += (v - low).to_bytes(n, "little")
            return v
        raw = self.data[self.pos:self.pos + n].ljust(n, b"\0")
        self.pos += n
        return low + int.from_bytes(raw, "little") % (high - low + 1)

    def flag(self) -> bool:
        if self.script is not None and self.script and isinstance(self.script[0], bool):
            self.script[0] = int(self.script[0])
        return self.int_in(0, 1) == 1

    def choice(self, options: list):
        """One of options (the seed script gives the option itself)."""
        if self.script is not None and self.script:
            self.script[0] = options.index(self.script[0])
        return options[self.int_in(0, len(options) - 1)]

    def num(self, low: int, high: int) -> int:
        """Mostly an int in [low, high] (15 in 16); else any int64."""
        if self.script is not None and self.script:
            v = self.script.pop(0)
            self.script[:0] = [0, v] if low <= v <= high else [15, v]
        if self.int_in(0, 15) != 15:
            return self.int_in(low, high)
        return self.int_in(*INT64)

    def blob(self, most: int) -> bytes:
        """Up to most bytes (a length, then the bytes)."""
        if self.script is not None and self.script:
            b = self.script.pop(0)
            self.script[:0] = [len(b)]
            self.int_in(0, most)
            self.out += b
            return bytes(b)
        n = self.int_in(0, most)
        raw = self.data[self.pos:self.pos + n].ljust(n, b"\0")
        self.pos += n
        return raw


def seed(describe, *values) -> bytes:
    """The input that makes describe(Reader) read values (in call order; missing ones are the
    lowest)."""
    r = Reader(script=list(values))
    describe(r)
    if r.script:
        raise ValueError(f"seed values left over: {r.script}")
    return bytes(r.out)


def clip(v: int) -> int:
    """v as a C int64 (saturated)."""
    return max(-(1 << 63), min(v, (1 << 63) - 1))


_libc = ctypes.CDLL(None)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                 ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


class Memory:
    """size bytes of memory owned by the harness, 64-byte aligned at address, and exactly that
    long (AddressSanitizer reports a read one byte outside); freed with the object."""

    def __init__(self, size: int) -> None:
        p = ctypes.c_void_p()
        if _libc.posix_memalign(ctypes.byref(p), 64, max(size, 1)):
            raise MemoryError(size)
        ctypes.memset(p, 0x5A, size)
        self.address, self.size, self.end = p.value, size, p.value + size
        weakref.finalize(self, _libc.free, p.value)

    def holds(self, lo: int, hi: int) -> bool:
        return self.address <= lo <= hi <= self.end


class Iface:
    """Speaks only __array_interface__."""

    def __init__(self, ai, keep=None) -> None:
        self.__array_interface__ = ai
        self.keep = keep


def typestr_size(typestr) -> int | None:
    """The item size a typestr states (its digits after the kind), or None."""
    if isinstance(typestr, str) and len(typestr) > 2 and typestr[2:].isdigit() and \
            typestr[2:].isascii():
        return int(typestr[2:])
    return None


def extent(address: int, itemsize: int, shape, strides) -> tuple[int, int]:
    """The bytes a (shape, byte strides or None) description at address reaches, with Python
    ints (no overflow); empty when a dimension is 0."""
    if strides is None:
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    lo = hi = 0
    for n, s in zip(shape, strides, strict=False):
        if n <= 0:
            return address, address
        lo, hi = lo + min((n - 1) * s, 0), hi + max((n - 1) * s, 0)
    return address + lo, address + hi + max(itemsize, 0)


def _instrument(module) -> None:
    """Coverage for the functions and methods a module defines (atheris.instrument_all would
    take every function loaded: 20 s of the sanitizer job's start per harness)."""
    for obj in list(vars(module).values()):
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            atheris.instrument_func(obj)
        elif inspect.isclass(obj):
            for member in vars(obj).values():
                if inspect.isfunction(member):
                    atheris.instrument_func(member)


def main(test_one_input, *modules) -> None:
    """Instrument the harness, this module and modules (dlpack's Python parts are, as they
    were imported), then fuzz."""
    for module in (sys.modules[test_one_input.__module__], sys.modules[__name__], *modules):
        _instrument(module)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
