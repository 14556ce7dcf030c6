"""The Arrow rules of ``python -m dlpack check`` (docs/spec.md §12, §13).

They grade an Arrow producer's PyCapsule export where it crosses into DLPack: capsule names, the
release callback run exactly once (capsules dropped unconsumed, and the array moved into
``asdlpack`` and released after its last view), offsets (the address a consumer computes from
``buffers`` and ``offset`` is the one the producer's other exports give, for a slice too) and
nulls (``null_count`` agrees with the validity bitmap). Release calls are observed as the
DLPack deleter is (``check.DeleterProbe``): a ctypes trampoline written into the struct's
``release`` field counts every call and forwards the first to the producer's own callback.
``check`` grades these rules after its own (its ``PRODUCERS`` suite holds both registries).
The module also holds the Arrow C structs as ctypes structures, for these rules and the tests.
"""

from __future__ import annotations

import ctypes
import functools
import gc
from collections.abc import Callable
from ctypes import CFUNCTYPE, POINTER, PYFUNCTYPE, c_char_p, c_int, c_int32, c_int64, c_void_p
from typing import Any

import dlpack._capsule_api as _capi
from dlpack.tools._grading import NA, Fail, Registry
from dlpack.tools._memory import readable

METHODS = {             # method -> the capsule names it returns
    "__arrow_c_device_array__": (b"arrow_schema", b"arrow_device_array"),
    "__arrow_c_array__": (b"arrow_schema", b"arrow_array"),
    "__arrow_c_stream__": (b"arrow_array_stream",),
    "__arrow_c_device_stream__": (b"arrow_device_array_stream",),
}


class ArrowSchema(ctypes.Structure):
    pass


class ArrowArray(ctypes.Structure):
    pass


class ArrowArrayStream(ctypes.Structure):
    pass


class ArrowDeviceArrayStream(ctypes.Structure):
    pass


SchemaRelease = CFUNCTYPE(None, POINTER(ArrowSchema))
ArrayRelease = CFUNCTYPE(None, POINTER(ArrowArray))
ArrowSchema._fields_ = [
    ("format", c_char_p), ("name", c_char_p), ("metadata", c_void_p), ("flags", c_int64),
    ("n_children", c_int64), ("children", POINTER(POINTER(ArrowSchema))),
    ("dictionary", POINTER(ArrowSchema)), ("release", SchemaRelease),
    ("private_data", c_void_p)]
ArrowArray._fields_ = [
    ("length", c_int64), ("null_count", c_int64), ("offset", c_int64), ("n_buffers", c_int64),
    ("n_children", c_int64), ("buffers", POINTER(c_void_p)),
    ("children", POINTER(POINTER(ArrowArray))), ("dictionary", POINTER(ArrowArray)),
    ("release", ArrayRelease), ("private_data", c_void_p)]


class ArrowDeviceArray(ctypes.Structure):
    _fields_ = [("array", ArrowArray), ("device_id", c_int64), ("device_type", c_int32),
                ("sync_event", c_void_p), ("reserved", c_int64 * 3)]


StreamGetSchema = CFUNCTYPE(c_int, POINTER(ArrowArrayStream), POINTER(ArrowSchema))
StreamGetNext = CFUNCTYPE(c_int, POINTER(ArrowArrayStream), POINTER(ArrowArray))
StreamLastError = CFUNCTYPE(c_void_p, POINTER(ArrowArrayStream))
StreamRelease = CFUNCTYPE(None, POINTER(ArrowArrayStream))
ArrowArrayStream._fields_ = [
    ("get_schema", StreamGetSchema), ("get_next", StreamGetNext),
    ("get_last_error", StreamLastError), ("release", StreamRelease), ("private_data", c_void_p)]
DeviceStreamGetNext = CFUNCTYPE(c_int, POINTER(ArrowDeviceArrayStream), POINTER(ArrowDeviceArray))
DeviceStreamRelease = CFUNCTYPE(None, POINTER(ArrowDeviceArrayStream))
ArrowDeviceArrayStream._fields_ = [
    ("device_type", c_int32),
    ("get_schema", CFUNCTYPE(c_int, POINTER(ArrowDeviceArrayStream), POINTER(ArrowSchema))),
    ("get_next", DeviceStreamGetNext),
    ("get_last_error", CFUNCTYPE(c_void_p, POINTER(ArrowDeviceArrayStream))),
    ("release", DeviceStreamRelease), ("private_data", c_void_p)]

STRUCTS = {b"arrow_schema": ArrowSchema, b"arrow_array": ArrowArray,
           b"arrow_device_array": ArrowDeviceArray, b"arrow_array_stream": ArrowArrayStream,
           b"arrow_device_array_stream": ArrowDeviceArrayStream}
PRIMITIVE_SIZES = {b"c": 1, b"C": 1, b"s": 2, b"S": 2, b"e": 2, b"i": 4, b"I": 4, b"f": 4,
                   b"l": 8, b"L": 8, b"g": 8}
_PROBES: list = []          # trampolines stay callable for the life of the process


def struct_of(capsule, name: bytes):
    """The Arrow struct a capsule holds (read in place, not consumed)."""
    if type(capsule).__name__ != "PyCapsule" or not _capi.IsValid(capsule, name):
        found = _capi.GetName(capsule) if type(capsule).__name__ == "PyCapsule" \
            else type(capsule).__name__
        raise Fail(f"expected a capsule named {name.decode()!r}, got {found!r}")
    return STRUCTS[name].from_address(_capi.GetPointer(capsule, name))


class ReleaseProbe:
    """Counts calls of a struct's release callback by writing a trampoline into its field; the
    first call is forwarded to the producer's own callback (a second would be a double free in
    this process), and each call marks the struct released, as the producer's would."""

    def __init__(self, struct) -> None:
        kind = type(struct)
        field = kind._fields_[[n for n, _ in kind._fields_].index("release")][1]
        self.calls = 0
        self.had_release = bool(struct.release)
        original = ctypes.cast(struct.release, c_void_p).value
        forward = PYFUNCTYPE(None, c_void_p)(original) if original else None

        def trampoline(ptr) -> None:
            self.calls += 1
            if self.calls == 1 and forward is not None:
                forward(ctypes.cast(ptr, c_void_p).value)
            ctypes.cast(ptr, POINTER(kind)).contents.release = field()

        self._fn = field(trampoline)
        _PROBES.append(self._fn)
        struct.release = self._fn


class StreamProbe:
    """Probes a stream's release and, through trampolines in get_schema and get_next, the
    release of every schema and chunk the stream hands out."""

    def __init__(self, stream: ArrowArrayStream) -> None:
        self.release = ReleaseProbe(stream)
        self.schemas: list[ReleaseProbe] = []
        self.chunks: list[ReleaseProbe] = []
        call = PYFUNCTYPE(c_int, c_void_p, c_void_p)
        schema_fn = ctypes.cast(stream.get_schema, c_void_p).value
        next_fn = ctypes.cast(stream.get_next, c_void_p).value
        if not schema_fn or not next_fn:
            raise Fail("__arrow_c_stream__: the stream's get_schema or get_next is NULL")
        get_schema, get_next = call(schema_fn), call(next_fn)

        def schema(st, out) -> int:
            rc = get_schema(ctypes.cast(st, c_void_p).value, ctypes.cast(out, c_void_p).value)
            if rc == 0 and out.contents.release:
                self.schemas.append(ReleaseProbe(out.contents))
            return rc

        def chunk(st, out) -> int:
            rc = get_next(ctypes.cast(st, c_void_p).value, ctypes.cast(out, c_void_p).value)
            if rc == 0 and out.contents.release:
                self.chunks.append(ReleaseProbe(out.contents))
            return rc

        self._fns = (StreamGetSchema(schema), StreamGetNext(chunk))
        _PROBES.extend(self._fns)
        stream.get_schema, stream.get_next = self._fns

    def counts(self) -> dict[str, list[int]]:
        return {"schema": [p.calls for p in self.schemas],
                "chunks": [p.calls for p in self.chunks], "stream": [self.release.calls]}


def speaks_arrow(obj: object) -> bool:
    """Whether obj has a method of the Arrow PyCapsule interface that makes arrays."""
    return any(hasattr(obj, m) for m in METHODS)


def _shim(method: str, result: Any) -> object:
    """An object whose only protocol is ``method`` returning ``result`` once."""
    class Shim:
        pass

    setattr(Shim, method, lambda self, requested_schema=None, **kw: result)
    return Shim()


def _column_of(schema: ArrowSchema, array: ArrowArray) -> tuple:
    """(schema, array, first index, length) of the column: a one-field struct's field (a
    record batch or query result), with the struct's offset applied, or the array itself."""
    if schema.format == b"+s" and schema.n_children == 1 and array.n_children == 1:
        child = array.children[0].contents
        return (schema.children[0].contents, child, child.offset + array.offset,
                array.length)
    return schema, array, array.offset, array.length


def _capsule(struct, name: bytes):
    """A capsule over a struct the rule owns (no destructor: the rule releases what is left)."""
    return _capi.New(ctypes.addressof(struct), name, _capi.Destructor())


def _zero_bits(address: int, start: int, count: int) -> int:
    """0 bits of a validity bitmap in [start, start + count), once the kernel says the bytes
    are mapped (a length the bitmap does not have fails the rule instead of the process)."""
    if start < 0 or count < 0:
        raise Fail(f"offset = {start}, length = {count}: a negative field")
    nbytes = (start + count + 7) // 8
    step = 1 << 15                  # half a pipe: readable() writes the bytes into one
    for at in range(0, nbytes, step):
        if not readable(address + at, min(step, nbytes - at)):
            raise Fail(f"the validity bitmap at {address:#x} holds fewer than the {nbytes} "
                       f"bytes offset = {start} and length = {count} need (byte {at} on is "
                       "not readable memory): a consumer crashes reading it")
    bits = (ctypes.c_ubyte * nbytes).from_address(address)
    return sum(1 for i in range(start, start + count) if not bits[i >> 3] >> (i & 7) & 1)


class ArrowChecker:
    """One producer object, and the exports of it that the Arrow rules read."""

    def __init__(self, factory: Callable[[], object]) -> None:
        self.factory = factory
        self.obj: Any = factory()
        self.methods = [m for m in METHODS if hasattr(self.obj, m)]

    def export(self, method: str, obj: Any = None) -> tuple:
        """The capsules of one call of method (a tuple even for streams)."""
        got = getattr(self.obj if obj is None else obj, method)()
        got = got if isinstance(got, tuple) else (got,)
        names = METHODS[method]
        if len(got) != len(names):
            raise Fail(f"{method} returned {len(got)} object(s); the interface names "
                       f"{[n.decode() for n in names]}")
        for capsule, name in zip(got, names, strict=True):
            struct = struct_of(capsule, name)
            if not (struct.array.release if name == b"arrow_device_array" else struct.release):
                raise Fail(f"{method} handed out a released {name.decode()} (release NULL)")
        return got

    def column(self, obj: Any = None, method: str | None = None
               ) -> tuple[ArrowSchema, ArrowArray, Callable[[], None]]:
        """The schema and first array of one export of obj (by method, else the first that
        asdlpack reads), and a call that releases whatever a consumer did not move out."""
        method = method or next((m for m in self.methods if m != "__arrow_c_device_stream__"),
                                None)
        if method is None:
            raise NA("the producer exports device streams only, which asdlpack does not read")
        got = self.export(method, obj)
        if method != "__arrow_c_stream__":
            schema = struct_of(got[0], b"arrow_schema")
            array = struct_of(got[1], METHODS[method][1])
            held = [got]        # dropping the capsules releases the structs
            return schema, array.array if method == "__arrow_c_device_array__" else array, \
                held.clear
        stream = struct_of(got[0], b"arrow_array_stream")
        schema, array = ArrowSchema(), ArrowArray()
        if stream.get_schema(stream, schema) != 0 or stream.get_next(stream, array) != 0:
            raise Fail("__arrow_c_stream__: the stream's get_schema or get_next failed")

        def release() -> None:
            for struct in (array, schema):
                if struct.release:
                    struct.release(struct)

        if not array.release:
            release()
            raise NA("__arrow_c_stream__ gives an empty stream; the layout rules read a chunk")
        return schema, array, release


def _producer_view(producer: Any) -> ArrowChecker:
    """What the Arrow rules grade of a producer being graded (its ``obj`` and ``factory``):
    its own ArrowChecker; n/a when the object (a bare capsule, say) speaks no Arrow."""
    if not speaks_arrow(producer.obj):
        raise NA("the producer speaks no Arrow PyCapsule interface")
    return ArrowChecker(producer.factory)


RULES = Registry(view=_producer_view)       # in the order they run


def arrow_rule(name: str) -> Callable[[Callable[[ArrowChecker], str]],
                                      Callable[[ArrowChecker], str]]:
    """Register an Arrow rule (graded whether or not basic-export passed); the exports it
    dropped are collected as it ends, so their releases run inside the rule."""
    def register(grade: Callable[[ArrowChecker], str]) -> Callable[[ArrowChecker], str]:
        @functools.wraps(grade)
        def collected(producer: ArrowChecker) -> str:
            try:
                return grade(producer)
            finally:
                gc.collect()
        RULES.rule(name, needs_export=False)(collected)
        return grade
    return register


@arrow_rule("arrow-capsules")
def arrow_capsules(producer: ArrowChecker) -> str:
    """Each method returns capsules with the interface's names, holding unreleased structs."""
    seen = []
    for method in producer.methods:
        got = producer.export(method)
        seen.append(f"{method} → {tuple(_capi.GetName(c).decode() for c in got)}")
    return "; ".join(seen)


@arrow_rule("arrow-release-unconsumed")
def arrow_release_unconsumed(producer: ArrowChecker) -> str:
    """Capsules dropped unconsumed release each struct exactly once."""
    seen = []
    for method in producer.methods:
        got = producer.export(method)
        probes = []
        for capsule, name in zip(got, METHODS[method], strict=True):
            struct = struct_of(capsule, name)
            probes.append((name, ReleaseProbe(struct.array if name == b"arrow_device_array"
                                              else struct)))
        del got, capsule, struct
        gc.collect()
        for name, probe in probes:
            if probe.calls != 1:
                raise Fail(f"{method}: an unconsumed {name.decode()} capsule's release ran "
                           f"{probe.calls} times (exactly once expected: "
                           f"{'a leak' if probe.calls == 0 else 'a double release'})")
        seen.append(method)
    return "every struct of " + ", ".join(seen) + " released exactly once"


@arrow_rule("arrow-release-consumed")
def arrow_release_consumed(producer: ArrowChecker) -> str:
    """Moved into asdlpack: the schema released at once, the array (and stream) exactly
    once, after the last view of the DLPackObject is gone."""
    from dlpack import asdlpack

    method = next((m for m in METHODS if m in producer.methods
                   and m != "__arrow_c_device_stream__"), None)
    if method is None:
        raise NA("asdlpack does not read device streams")
    got = producer.export(method)
    if method == "__arrow_c_stream__":
        probe = StreamProbe(struct_of(got[0], b"arrow_array_stream"))
        counts = probe.counts
    else:
        schema = ReleaseProbe(struct_of(got[0], b"arrow_schema"))
        array = struct_of(got[1], METHODS[method][1])
        chunk = ReleaseProbe(array.array if method == "__arrow_c_device_array__" else array)
        del array

        def counts() -> dict[str, list[int]]:
            return {"schema": [schema.calls], "chunks": [chunk.calls]}

    shim = _shim(method, got if len(got) > 1 else got[0])
    del got
    try:
        dl = asdlpack(shim)
    except BufferError as e:
        dl, refusal = None, e
    gc.collect()
    if dl is None:
        if any(c != 1 for calls in counts().values() for c in calls):
            raise Fail(f"asdlpack refused ({refusal}) and the releases ran {counts()} "
                       "times (exactly once each expected)")
        raise NA(f"asdlpack refuses this data ({refusal}); each struct was released "
                 "exactly once")
    if counts()["schema"] != [1]:
        raise Fail(f"the schema's release ran {counts()['schema']} times at once after "
                   "reading (exactly once expected)")
    view = dl.__dlpack__(max_version=(1, 0))
    del dl
    gc.collect()
    alive = counts()
    if 0 not in alive["chunks"] or any(alive.get("stream", [])):
        raise Fail(f"releases ran {alive} times while a view of the data was alive")
    del view
    gc.collect()
    after = counts()
    if any(c != 1 for calls in after.values() for c in calls):
        raise Fail(f"after the last view was gone the releases ran {after} times "
                   "(exactly once each expected)")
    return (f"via {method}: the schema released at once; {len(after['chunks'])} array(s)"
            f"{' and the stream' if 'stream' in after else ''} released exactly once, the "
            "viewed one after the last view")


@arrow_rule("arrow-offsets")
def arrow_offsets(producer: ArrowChecker) -> str:
    """Within each export, asdlpack's tensor starts at buffers[1] + offset × item size of
    the column and has its length; __dlpack__ agrees; a slice starts item size further."""
    from dlpack import asdlpack, todict

    seen = []
    base = None
    for method in producer.methods:
        if method == "__arrow_c_device_stream__":
            continue
        schema, array, release = producer.column(method=method)
        try:
            col_schema, col, start, length = _column_of(schema, array)
            size = PRIMITIVE_SIZES.get(col_schema.format)
            if size is None or col.n_buffers != 2 or col_schema.dictionary:
                raise NA(f"format {col_schema.format!r} is not a primitive type; the "
                         "layout rules read primitive arrays")
            address = (col.buffers[1] or 0) + start * size
            try:        # the same structs, moved into asdlpack
                dl = asdlpack(_shim("__arrow_c_array__", (_capsule(schema, b"arrow_schema"),
                                                          _capsule(array, b"arrow_array"))))
            except BufferError as e:
                seen.append(f"{method}: {length} values at {address:#x}, asdlpack refuses "
                            f"({str(e).split(';')[0]})")
                continue
            if length and (dl.data_ptr, dl.shape) != (address, (length,)):
                raise Fail(f"{method}: the column says ({length},) at {address:#x}; "
                           f"asdlpack reads {dl.shape} at {dl.data_ptr:#x}")
            seen.append(f"{method}: {length} values at {address:#x}")
            base = base or (dl, size)
        finally:
            release()
    if base is None:
        return "; ".join(seen)
    dl, size = base
    if hasattr(producer.obj, "__dlpack__"):
        info = todict(producer.obj)
        if (info["data"] + info["byte_offset"], info["shape"]) != (dl.data_ptr, dl.shape):
            raise Fail(f"__dlpack__ gives {info['shape']} at "
                       f"{info['data'] + info['byte_offset']:#x}; the Arrow export "
                       f"{dl.shape} at {dl.data_ptr:#x}")
        seen.append("__dlpack__ agrees")
    n = dl.shape[0]
    if callable(getattr(producer.obj, "slice", None)) and n >= 3:
        part = asdlpack(producer.obj.slice(1, n - 2))
        if (part.data_ptr, part.shape) != (dl.data_ptr + size, (n - 2,)):
            raise Fail(f"slice(1, {n - 2}) reads as {part.shape} at {part.data_ptr:#x}; "
                       f"expected ({n - 2},) at {dl.data_ptr + size:#x} (offset lost?)")
        seen.append(f"slice(1, {n - 2}) at {part.data_ptr:#x}")
    return "; ".join(seen)


@arrow_rule("arrow-nulls")
def arrow_nulls(producer: ArrowChecker) -> str:
    """null_count is the number of 0 validity bits in [offset, offset + length), or -1;
    a NULL bitmap means no nulls; asdlpack refuses nulls naming fill_null."""
    from dlpack import asdlpack

    schema, array, release = producer.column()
    try:
        schema, array, _, _ = _column_of(schema, array)
        if PRIMITIVE_SIZES.get(schema.format) is None or array.n_buffers < 1:
            raise NA(f"format {schema.format!r} is not a primitive type")
        bitmap = array.buffers[0]
        count = array.null_count
        if not bitmap:
            if count not in (0, -1):
                raise Fail(f"null_count = {count} with a NULL validity bitmap")
            zeros = 0
        else:
            zeros = _zero_bits(bitmap, array.offset, array.length)
            if count not in (-1, zeros):
                raise Fail(f"null_count = {count}, but {zeros} validity bits of [offset, "
                           "offset + length) are 0")
    finally:
        release()
    if not zeros:
        return f"null_count = {count}, {'no bitmap' if not bitmap else 'bitmap all set'}"
    try:
        asdlpack(producer.obj)
    except BufferError as e:
        if "fill_null" not in str(e):
            raise Fail(f"asdlpack refused the nulls without naming fill_null: {e}") \
                from None
        return f"null_count = {count} matches the bitmap; asdlpack refuses, naming fill_null"
    raise Fail(f"{zeros} nulls, and asdlpack accepted them")
