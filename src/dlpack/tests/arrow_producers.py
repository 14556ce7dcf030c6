"""Arrow producers built with ctypes: every field of every struct under the test's control and
every release callback counted (the tests and the hostile corpus; no Arrow library needed).

``Col`` describes one level of a column (its type and its array fields); ``ArrayProducer``,
``DeviceProducer`` and ``StreamProducer`` hand its structs out through the PyCapsule interface.
Capsules have no destructor: the structs live in ``KEEP`` for the whole process, so a test can
read their fields after a consumer released them.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field

from dlpack.tools.check_arrow import (
    ArrayRelease,
    ArrowArray,
    ArrowArrayStream,
    ArrowDeviceArray,
    ArrowSchema,
    SchemaRelease,
    StreamGetNext,
    StreamGetSchema,
    StreamLastError,
    StreamRelease,
)

KEEP: list = []

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_STRUCTS = {b"arrow_schema": ArrowSchema, b"arrow_array": ArrowArray,
            b"arrow_array_stream": ArrowArrayStream}
RELEASES_ON_DROP = [1]          # how many times the destructor calls release (tests break it)


def _destroy(address: int) -> None:
    """The PyCapsule interface's destructor: release the struct unless a consumer moved it."""
    name = _get_name(address)
    struct = _STRUCTS[name].from_address(_get_pointer(address, name))
    if struct.release:
        release = type(struct.release)(ctypes.cast(struct.release, ctypes.c_void_p).value)
        for _ in range(RELEASES_ON_DROP[0]):
            release(struct)


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy)


def capsule(struct_obj, name: bytes, destructor: bool = False):
    """A capsule over a ctypes struct (kept in KEEP); with the interface's destructor if asked
    (without, an unconsumed struct is never released)."""
    KEEP.append(struct_obj)
    return _capsule_new(ctypes.addressof(struct_obj), name,
                        ctypes.cast(_DESTRUCTOR, ctypes.c_void_p) if destructor else None)


def metadata(pairs: dict[bytes, bytes]) -> bytes:
    """Arrow's binary metadata: int32 count, then length-prefixed keys and values."""
    out = struct.pack("=i", len(pairs))
    for k, v in pairs.items():
        out += struct.pack("=i", len(k)) + k + struct.pack("=i", len(v)) + v
    return out


def extension(name: bytes, meta: bytes = b"") -> bytes:
    return metadata({b"ARROW:extension:name": name, b"ARROW:extension:metadata": meta})


def bitmap(bits: str) -> bytearray:
    """A validity bitmap from '1'/'0' characters, bit i = character i (LSB first)."""
    out = bytearray((len(bits) + 7) // 8 + 8)
    for i, b in enumerate(bits):
        if b == "1":
            out[i >> 3] |= 1 << (i & 7)
    return out


def values(code: str, items) -> ctypes.Array:
    """A 64-byte aligned buffer holding items as array-module type code (plus 64 spare bytes)."""
    raw = struct.pack(f"={len(items)}{code}", *items)
    buf = (ctypes.c_ubyte * (len(raw) + 128))()
    start = -ctypes.addressof(buf) % 64
    ctypes.memmove(ctypes.addressof(buf) + start, raw, len(raw))
    KEEP.append(buf)
    return Address(ctypes.addressof(buf) + start)


@dataclass(frozen=True)
class Address:
    """A raw pointer value for a buffer field (any int, however hostile)."""

    value: int


@dataclass
class Col:
    """One level of a column: its schema fields and its array fields.

    ``buffers`` items are ``None`` (NULL), ``Address`` or a writable buffer; ``n_buffers`` and
    ``n_children`` default to the lengths of ``buffers`` and ``children``.
    """

    format: bytes | None
    length: int = 0
    offset: int = 0
    null_count: int = 0
    buffers: list = field(default_factory=list)
    children: list[Col] = field(default_factory=list)
    metadata: bytes | None = None
    name: bytes = b""
    dictionary: bool = False
    n_buffers: int | None = None
    n_children: int | None = None
    buffers_null: bool = False              # the 'buffers' pointer itself is NULL
    released_child: bool = False            # the array struct is marked released


def _address(buf) -> int | None:
    if buf is None:
        return None
    if isinstance(buf, Address):
        return buf.value
    KEEP.append(buf)
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def _noop_schema(p) -> None:
    p.contents.release = SchemaRelease()


def _noop_array(p) -> None:
    p.contents.release = ArrayRelease()


_NOOP_SCHEMA = SchemaRelease(_noop_schema)
_NOOP_ARRAY = ArrayRelease(_noop_array)


def build_schema(col: Col) -> ArrowSchema:
    s = ArrowSchema()
    KEEP.append(s)
    s.format = col.format
    s.name = col.name
    if col.metadata is not None:
        meta = ctypes.create_string_buffer(col.metadata, len(col.metadata) + 8)
        KEEP.append(meta)
        s.metadata = ctypes.addressof(meta)
    s.n_children = len(col.children) if col.n_children is None else col.n_children
    if col.children:
        kids = (ctypes.POINTER(ArrowSchema) * len(col.children))(
            *[ctypes.pointer(build_schema(c)) for c in col.children])
        KEEP.append(kids)
        s.children = ctypes.cast(kids, ctypes.POINTER(ctypes.POINTER(ArrowSchema)))
    if col.dictionary:
        d = build_schema(Col(b"u"))
        s.dictionary = ctypes.pointer(d)
    s.release = _NOOP_SCHEMA
    return s


def build_array(col: Col) -> ArrowArray:
    a = ArrowArray()
    KEEP.append(a)
    a.length, a.offset, a.null_count = col.length, col.offset, col.null_count
    a.n_buffers = len(col.buffers) if col.n_buffers is None else col.n_buffers
    if col.buffers and not col.buffers_null:
        ptrs = (ctypes.c_void_p * len(col.buffers))(*[_address(b) for b in col.buffers])
        KEEP.append(ptrs)
        a.buffers = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
    a.n_children = len(col.children) if col.n_children is None else col.n_children
    if col.children:
        kids = (ctypes.POINTER(ArrowArray) * len(col.children))(
            *[ctypes.pointer(build_array(c)) for c in col.children])
        KEEP.append(kids)
        a.children = ctypes.cast(kids, ctypes.POINTER(ctypes.POINTER(ArrowArray)))
    if col.dictionary:
        a.dictionary = ctypes.pointer(build_array(Col(b"u")))
    a.release = ArrayRelease() if col.released_child else _NOOP_ARRAY
    return a


class Counted:
    """Release callbacks that count their calls and mark the struct released, as producers'
    callbacks do (children first)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def schema(self, key: str):
        def release(p) -> None:
            self.calls[key] = self.calls.get(key, 0) + 1
            _release_children(p.contents)
            p.contents.release = SchemaRelease()

        fn = SchemaRelease(release)
        KEEP.append(fn)
        return fn

    def array(self, key: str):
        def release(p) -> None:
            self.calls[key] = self.calls.get(key, 0) + 1
            _release_children(p.contents)
            p.contents.release = ArrayRelease()

        fn = ArrayRelease(release)
        KEEP.append(fn)
        return fn


def _release_children(s) -> None:
    for i in range(max(0, min(s.n_children, 64)) if s.children else 0):
        child = s.children[i]
        if child and child.contents.release:
            child.contents.release(child)


class ArrayProducer:
    """Speaks ``__arrow_c_array__`` only; its base structs count their releases."""

    def __init__(self, col: Col, schema: Col | None = None, destructor: bool = False) -> None:
        self.counted = Counted()
        self.col, self.destructor = col, destructor
        self.schema = build_schema(schema or col)
        self.array = build_array(col)
        self.schema.release = self.counted.schema("schema")
        self.array.release = self.counted.array("array")

    @property
    def released(self) -> dict[str, int]:
        return self.counted.calls

    def __arrow_c_array__(self, requested_schema=None):
        if self.destructor:         # a fresh pair of structs per call, as real producers give
            fresh = ArrayProducer(self.col, destructor=True)
            fresh.counted = self.counted
            fresh.schema.release = self.counted.schema("schema")
            fresh.array.release = self.counted.array("array")
            return (capsule(fresh.schema, b"arrow_schema", True),
                    capsule(fresh.array, b"arrow_array", True))
        return capsule(self.schema, b"arrow_schema"), capsule(self.array, b"arrow_array")


class DeviceProducer:
    """Speaks ``__arrow_c_device_array__`` only: device type, id and sync_event chosen."""

    def __init__(self, col: Col, device_type: int = 1, device_id: int = -1,
                 event: int | None = None) -> None:
        self.counted = Counted()
        self.schema = build_schema(col)
        self.schema.release = self.counted.schema("schema")
        self.device = ArrowDeviceArray()
        KEEP.append(self.device)
        self.device.array = build_array(col)
        self.device.array.release = self.counted.array("array")
        self.device.device_type, self.device.device_id = device_type, device_id
        if event is not None:
            self.event = ctypes.c_void_p(event)       # sync_event points at a CUevent
            self.device.sync_event = ctypes.addressof(self.event)

    @property
    def released(self) -> dict[str, int]:
        return self.counted.calls

    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return capsule(self.schema, b"arrow_schema"), capsule(self.device,
                                                              b"arrow_device_array")


class StreamProducer:
    """Speaks ``__arrow_c_stream__`` only: a schema and chunks, errors on demand, every
    release (stream, schemas, chunks) counted."""

    def __init__(self, schema: Col, chunks: list[Col], *, schema_error: int = 0,
                 next_error: int = 0, error_text: bytes | None = b"producer failed") -> None:
        self.counted = Counted()
        self.schema_col, self.chunks = schema, list(chunks)
        self.schema_error, self.next_error = schema_error, next_error
        self.error = ctypes.create_string_buffer(error_text) if error_text is not None else None
        self.handed = 0
        self.stream = ArrowArrayStream()
        fns = (StreamGetSchema(self._get_schema), StreamGetNext(self._get_next),
               StreamLastError(self._last_error), StreamRelease(self._release))
        KEEP.extend(fns)
        (self.stream.get_schema, self.stream.get_next, self.stream.get_last_error,
         self.stream.release) = fns

    @property
    def released(self) -> dict[str, int]:
        return self.counted.calls

    def _get_schema(self, st, out) -> int:
        if self.schema_error:
            return self.schema_error
        s = build_schema(self.schema_col)
        s.release = self.counted.schema("schema")
        ctypes.memmove(out, ctypes.addressof(s), ctypes.sizeof(ArrowSchema))
        return 0

    def _get_next(self, st, out) -> int:
        if self.next_error and self.handed == len(self.chunks) // 2:
            return self.next_error
        if self.handed >= len(self.chunks):
            out.contents.release = ArrayRelease()
            return 0
        a = build_array(self.chunks[self.handed])
        a.release = self.counted.array(f"chunk{self.handed}")
        self.handed += 1
        ctypes.memmove(out, ctypes.addressof(a), ctypes.sizeof(ArrowArray))
        return 0

    def _last_error(self, st) -> int | None:
        return ctypes.addressof(self.error) if self.error is not None else None

    def _release(self, st) -> None:
        self.counted.calls["stream"] = self.counted.calls.get("stream", 0) + 1
        st.contents.release = StreamRelease()

    def __arrow_c_stream__(self, requested_schema=None):
        return capsule(self.stream, b"arrow_array_stream")


def primitive(code: str, items, fmt: bytes, **fields) -> Col:
    """A primitive column of items (array-module code) with format fmt."""
    return Col(fmt, len(items), buffers=[None, values(code, items)], **fields)


def callback(field):
    """A function pointer read out of a struct field (ctypes' field object aliases the field)."""
    return type(field)(ctypes.cast(field, ctypes.c_void_p).value)
