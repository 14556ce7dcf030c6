"""The hostile corpus (docs/spec.md §7): inputs that must be refused cleanly or read right.

Each case is a function and what it must give: an exception (type and key words) or a value.
``python -m dlpack.tests.hostile GROUP [FIRST]`` runs a group's cases in a child interpreter,
printing ``START name`` before each case (flushed, so a crash names it) and ``RESULT {json}``
after; ``test_hostile.py`` runs the groups and asserts case by case. Most cases need only the
standard library and ctypes, so the corpus also runs under the sanitizers without NumPy.
"""

from __future__ import annotations

import array
import collections
import ctypes
import gc
import importlib.util
import json
import mmap
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from dlpack.tests import subinterpreters as _subinterpreters

N = "<" if sys.byteorder == "little" else ">"          # native byte-order character
SWAP = ">" if N == "<" else "<"

AI = "__array_interface__"
CAI = "__cuda_array_interface__"
AS = "__array_struct__"
BUF = "buffer protocol"
CAP = "DLPack capsule"
PTR = "ctypes pointer"

# An __array_struct__ refusal of its kind or size names one of these fields.
KIND = (("'itemsize'", "'typestr'", "'typekind'"),)

# Text that means an internal exception leaked through instead of a refusal (docs/spec.md §7).
LEAKS = ("unhashable", "chr()", "index out of range", "too large to convert", "Expected dict",
         "is not C-contiguous", "is a int")


@dataclass(frozen=True)
class Raises:
    """The case raises one of ``types`` (a subclass counts: pydlpack's DLPackError is a
    BufferError); each of ``words`` (or one of a tuple's) is in the text."""

    types: tuple[str, ...]
    words: tuple[str | tuple[str, ...], ...] = ()
    after: object = None        # what the case's ``after`` hook must return, if it has one


@dataclass(frozen=True)
class Gives:
    """The case returns ``value`` (compared after a JSON round trip: tuples become lists)."""

    value: object
    after: object = None


@dataclass
class Case:
    name: str
    group: str
    run: Callable[[], object]
    expect: Raises | Gives
    needs: tuple[str, ...] = ()
    after: Callable[[], object] | None = None


CASES: dict[str, Case] = {}


def add(group: str, name: str, run, expect, *, needs=(), after=None) -> None:
    """Register one case (names are unique across the corpus)."""
    name = f"{group}:{name}"
    assert name not in CASES, name
    CASES[name] = Case(name, group, run, expect, tuple(needs), after)


def buffer_error(*words, after=None) -> Raises:
    return Raises(("BufferError",), words, after)


def type_error(*words) -> Raises:
    return Raises(("TypeError",), words)


def no_memory(*words) -> Raises:
    """A size no machine can allocate: MemoryError, or BufferError saying so."""
    return Raises(("MemoryError", "BufferError"), words)


def asdlpack(obj, **kwargs):
    from dlpack import asdlpack as _asdlpack

    return _asdlpack(obj, **kwargs)


def _from_address(*args, **kwargs):
    from dlpack import from_address

    return from_address(*args, **kwargs)


def summary(dl) -> list:
    """What a case reports of an accepted object: shape, element strides, dtype, read-only."""
    return [list(dl.shape), list(dl.strides), dl.dtype.name, dl.readonly]


def address(buf) -> int:
    """Address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


# -- __array_interface__ / __cuda_array_interface__ dicts ----------------------------------------

DROP = object()       # a field left out of the dict


class Iface:
    """An object whose only protocol is the interface dict it was given."""

    def __init__(self, value, name: str = AI) -> None:
        setattr(self, name, value)


def ai(**fields) -> dict:
    """A valid 2-element float64 interface dict over a fresh 16-byte buffer, with overrides."""
    d = {"shape": (2,), "typestr": N + "f8", "data": bytearray(16), "version": 3}
    d.update(fields)
    return {k: v for k, v in d.items() if v is not DROP}


def via_ai(**fields):
    """Hand ``ai(**fields)`` to asdlpack and summarise what it made."""
    return lambda: summary(asdlpack(Iface(ai(**fields))))


def via_cai(**fields):
    d = {"shape": (2,), "typestr": N + "f8", "data": (0, False), "version": 3}
    d.update(fields)
    return lambda: summary(asdlpack(Iface(d, CAI)))


class LyingInt(int):
    """An int whose == answers False to everything (so ``x == 0`` hides a zero)."""

    def __eq__(self, other):
        return False

    __hash__ = int.__hash__


class Index:
    """An object with ``__index__``, which runs ``action`` and returns ``value``."""

    def __init__(self, value, action=None) -> None:
        self.value, self.action = value, action

    def __index__(self):
        if self.action is not None:
            self.action()
        return self.value() if callable(self.value) else self.value


def _raise(exc):
    def action():
        raise exc

    return action


def _register_sizes() -> None:
    g = "sizes"
    cases = [
        # strides whose span wraps around 2**64 once multiplied by the extent
        ("stride-2**62-x5", dict(shape=(5,), strides=(2**62,)), buffer_error(AI)),
        ("stride--2**62-x5", dict(shape=(5,), strides=(-(2**62),)), buffer_error(AI)),
        ("stride-2**61-x9", dict(shape=(9,), strides=(2**61,)), buffer_error(AI)),
        ("stride-2**63-8-x3", dict(shape=(3,), strides=(2**63 - 8,)), buffer_error(AI)),
        ("stride-2**62-2d", dict(shape=(5, 2), strides=(2**62, 8)), buffer_error(AI)),
        ("stride-mixed-sign", dict(shape=(3, 3), strides=(2**62, -(2**62))), buffer_error(AI)),
        ("stride-2**63", dict(shape=(2,), strides=(2**63,)), buffer_error(AI, "'strides'")),
        ("stride--2**63-8", dict(shape=(2,), strides=(-(2**63) - 8,)),
         buffer_error(AI, "'strides'")),
        ("stride-2**64", dict(shape=(2,), strides=(2**64,)), buffer_error(AI, "'strides'")),
        ("stride-2**200", dict(shape=(2,), strides=(2**200,)), buffer_error(AI, "'strides'")),
        ("stride-past-end", dict(shape=(3,), strides=(8,)), buffer_error(AI, "outside")),
        ("stride-negative-past-start", dict(shape=(2,), strides=(-8,)),
         buffer_error(AI, "outside")),
        # offsets near the top of the address range
        ("offset-2**63-1", dict(offset=2**63 - 1), buffer_error(AI, ("'offset'", "outside"))),
        ("offset-2**63-16", dict(offset=2**63 - 16), buffer_error(AI, ("'offset'", "outside"))),
        ("offset-2**63", dict(offset=2**63), buffer_error(AI, "'offset'")),
        ("offset-2**64", dict(offset=2**64), buffer_error(AI, "'offset'")),
        ("offset-2**100", dict(offset=2**100), buffer_error(AI, "'offset'")),
        ("offset--1", dict(offset=-1), buffer_error(AI, ("'offset'", "outside"))),
        ("offset--2**63", dict(offset=-(2**63)), buffer_error(AI, ("'offset'", "outside"))),
        ("offset-negative-stride", dict(offset=8, strides=(-(2**62),)),
         buffer_error(AI, "outside")),
        ("offset-len", dict(offset=16), buffer_error(AI, "outside")),
        ("offset-float", dict(offset=8.0), buffer_error(AI, "'offset'")),
        ("offset-str", dict(offset="8"), buffer_error(AI, "'offset'")),
        ("offset-bool", dict(offset=True), buffer_error(AI, "outside")),
        ("offset-index-raises", dict(offset=Index(0, _raise(RuntimeError("boom")))),
         buffer_error(AI, "RuntimeError", "boom")),
        # element counts that cannot fit in memory
        ("shape-2**62-squared", dict(shape=(2**62, 2**62)), buffer_error(AI, "more elements")),
        ("shape-2**31-cubed", dict(shape=(2**31, 2**31, 2**31)),
         buffer_error(AI, "more elements")),
        ("shape-2**60-f8-broadcast", dict(shape=(2**60,), strides=(0,)),
         buffer_error(AI, "more elements")),
        ("shape-2**63", dict(shape=(2**63,)), buffer_error(AI, "'shape'")),
        ("shape-2**64", dict(shape=(2**64,)), buffer_error(AI, "'shape'")),
        ("shape-2**100", dict(shape=(2**100,)), buffer_error(AI, "'shape'")),
        ("shape--1", dict(shape=(-1,)), buffer_error(AI, "negative extent")),
        ("shape--1-times-0", dict(shape=(-1, 0)), buffer_error(AI, "negative extent")),
        ("shape--2**63", dict(shape=(-(2**63),)), buffer_error(AI, ("negative extent",
                                                                   "'shape'"))),
        ("shape--3-strides--8", dict(shape=(-3,), strides=(-8,)),
         buffer_error(AI, "negative extent")),
        ("shape-too-big-for-buffer", dict(shape=(3,)), buffer_error(AI, "outside")),
        # legal, if odd, views that must be accepted with the right numbers
        ("broadcast-2**59", dict(shape=(2**59,), strides=(0,)),
         Gives([[2**59], [0], "float64", False])),
        ("zero-size-offset-len", dict(shape=(0,), offset=16), Gives([[0], [1], "float64", False])),
        # an empty array reaches no memory: its strides are normalised (C-contiguous)
        ("zero-size-huge-stride", dict(shape=(0, 4), strides=(2**62, 8)),
         Gives([[0, 4], [4, 1], "float64", False])),
        ("negative-stride-inside", dict(shape=(2,), strides=(-8,), offset=8),
         Gives([[2], [-1], "float64", False])),
    ]
    for name, fields, expect in cases:
        add(g, name, via_ai(**fields), expect)

    def broadcast_nbytes():
        np = sys.modules.get("numpy") or __import__("numpy")
        dl = asdlpack(np.broadcast_to(np.zeros((1, 1)), (2**58 + 1, 1)))
        return [dl.size, dl.nbytes]

    def broadcast(action):
        def run():
            np = __import__("numpy")
            dl = asdlpack(np.broadcast_to(np.zeros((1, 1)), (2**58 + 1, 1)))
            action(dl)
        return run

    add(g, "numpy-broadcast-nbytes", broadcast_nbytes,
        Gives([2**58 + 1, (2**58 + 1) * 8]), needs=["numpy"])
    add(g, "numpy-broadcast-tobytes", broadcast(lambda dl: memoryview(dl).tobytes()),
        no_memory(), needs=["numpy"])
    add(g, "numpy-broadcast-bytes", broadcast(bytes), no_memory(), needs=["numpy"])
    add(g, "numpy-broadcast-copy", broadcast(lambda dl: dl.__dlpack__(copy=True)),
        no_memory(), needs=["numpy"])
    add(g, "numpy-broadcast-copy-legacy",
        broadcast(lambda dl: dl.__dlpack__(max_version=(1, 0), copy=True)), no_memory(),
        needs=["numpy"])

    def ai_broadcast(action):
        def run():
            action(asdlpack(Iface(ai(shape=(2**58 + 1, 1), strides=(0, 0)))))
        return run

    add(g, "ai-broadcast-tobytes", ai_broadcast(lambda dl: memoryview(dl).tobytes()),
        no_memory())
    add(g, "ai-broadcast-copy", ai_broadcast(lambda dl: dl.__dlpack__(copy=True)), no_memory())
    add(g, "ai-broadcast-nbytes", lambda: asdlpack(Iface(ai(shape=(2**58 + 1, 1),
                                                             strides=(0, 0)))).nbytes,
        Gives((2**58 + 1) * 8))


def _register_sequences() -> None:
    g = "sequences"

    def mutating(make):
        """make(shape_list, strides_list) -> fields: the lists given in the dict."""
        def run():
            shape, strides = [], []
            fields = make(shape, strides)
            return summary(asdlpack(Iface(ai(data=bytearray(256), **fields))))
        return run

    def grow(lst, n=1000):
        return lambda: lst.extend([1] * n)

    # tuple and list subclasses are read from their own storage, as NumPy reads a shape: an
    # __iter__, __len__ or __getitem__ saying 2**40 (an 8 TiB view of a 16-byte pointer) is not
    # asked; from_address reads its shape and strides the same way
    lying = {
        "tuple": type("LyingTuple", (tuple,), {"__iter__": lambda self: iter((2**40,)),
                                               "__len__": lambda self: 1,
                                               "__getitem__": lambda self, i: 2**40}),
        "list": type("LyingList", (list,), {"__iter__": lambda self: iter((2**40,)),
                                            "__len__": lambda self: 1,
                                            "__getitem__": lambda self, i: 2**40})}
    payload = (ctypes.c_double * 2)(1.0, 2.0)
    KEEP.append(payload)
    where = (ctypes.addressof(payload), False)
    for kind, cls in lying.items():
        add(g, f"shape-{kind}-subclass-lies", lambda cls=cls: summary(asdlpack(Iface(ai(
            data=where, shape=cls((2,)))))), Gives([[2], [1], "float64", False]))
        add(g, f"strides-{kind}-subclass-lies", lambda cls=cls: summary(asdlpack(Iface(ai(
            data=where, strides=cls((8,)))))), Gives([[2], [1], "float64", False]))
        add(g, f"from-address-{kind}-subclass-lies", lambda cls=cls: summary(_from_address(
            where[0], cls((2,)), "float64", owner=payload, strides=cls((1,)))),
            Gives([[2], [1], "float64", False]))

    add(g, "shape-grows", mutating(lambda sh, st: (sh.extend([Index(2, grow(sh)), 1]),
                                                   dict(shape=sh))[1]),
        Gives([[2, 1], [1, 1], "float64", False]))
    add(g, "shape-grows-a-lot", mutating(lambda sh, st: (sh.extend([Index(2, grow(sh, 10**5)),
                                                                    2, 2]), dict(shape=sh))[1]),
        Gives([[2, 2, 2], [4, 2, 1], "float64", False]))
    add(g, "shape-shrinks", mutating(lambda sh, st: (sh.extend([Index(2, sh.clear), 3, 4]),
                                                     dict(shape=sh))[1]),
        Gives([[2, 3, 4], [12, 4, 1], "float64", False]))
    add(g, "shape-shrinks-last", mutating(lambda sh, st: (sh.extend([1, 2, Index(4, sh.clear)]),
                                                          dict(shape=sh))[1]),
        Gives([[1, 2, 4], [8, 4, 1], "float64", False]))
    add(g, "strides-grow", mutating(lambda sh, st: (st.extend([Index(8, grow(st)), 8]),
                                                    dict(shape=(2, 1), strides=st))[1]),
        Gives([[2, 1], [1, 1], "float64", False]))
    add(g, "strides-shrink", mutating(lambda sh, st: (st.extend([Index(16, st.clear), 8]),
                                                      dict(shape=(2, 2), strides=st))[1]),
        Gives([[2, 2], [2, 1], "float64", False]))
    add(g, "shape-grows-strides",
        mutating(lambda sh, st: (st.extend([16, 8]),
                                 dict(shape=[Index(2, grow(st)), 2], strides=st))[1]),
        Gives([[2, 2], [2, 1], "float64", False]))
    add(g, "strides-grow-shape",
        mutating(lambda sh, st: (sh.extend([2, 2]),
                                 dict(shape=sh, strides=[Index(16, grow(sh)), 8]))[1]),
        Gives([[2, 2], [2, 1], "float64", False]))

    bad_items = [
        ("index-raises-runtime", Index(2, _raise(RuntimeError("boom")))),
        ("index-raises-value", Index(2, _raise(ValueError("boom")))),
        ("index-raises-index", Index(2, _raise(IndexError("boom")))),
        ("index-raises-overflow", Index(2, _raise(OverflowError("boom")))),
        ("index-raises-keyerror", Index(2, _raise(KeyError("boom")))),
        ("index-returns-float", Index(2.0)),
        ("index-returns-str", Index("2")),
        ("index-returns-huge", Index(2**70)),
        ("float", 2.0),
        ("str", "2"),
        ("bytes", b"2"),
        ("none", None),
        ("list", [2]),
        ("complex", 2j),
        ("huge", 2**70),
        ("object", object()),
    ]
    for name, item in bad_items:
        # An element's own exception is the producer's: wrapped, type and message kept.
        raised = name.startswith("index-raises") and name != "index-raises-overflow"
        add(g, f"shape-{name}", via_ai(shape=(item,)),
            buffer_error(AI, "boom") if raised else buffer_error(AI, "'shape'"))
        add(g, f"strides-{name}", via_ai(strides=(item,)),
            buffer_error(AI, "boom") if raised else buffer_error(AI, "'strides'"))
    add(g, "shape-bool", via_ai(shape=(True,)), Gives([[1], [1], "float64", False]))
    for name, value in [("str", "2"), ("int", 2), ("none", None), ("set", {2}), ("dict", {0: 2}),
                        ("bytes", b"\x02"), ("generator", (i for i in (2,)))]:
        add(g, f"shape-container-{name}", via_ai(shape=value), buffer_error(AI, "'shape'"))
    for name, value in [("str", "8"), ("int", 8), ("set", {8}), ("too-long", (8, 8)),
                        ("too-short", ()), ("generator", (i for i in (8,)))]:
        add(g, f"strides-container-{name}", via_ai(strides=value), buffer_error(AI, "'strides'"))
    add(g, "shape-missing", via_ai(shape=DROP), buffer_error(AI, "'shape'"))
    add(g, "shape-as-list", via_ai(shape=[2]), Gives([[2], [1], "float64", False]))
    add(g, "strides-as-list", via_ai(strides=[8]), Gives([[2], [1], "float64", False]))
    add(g, "shape-index-object", via_ai(shape=(Index(2),)), Gives([[2], [1], "float64", False]))
    add(g, "strides-not-multiple", via_ai(strides=(4,)), buffer_error(AI, "'strides'"))
    add(g, "shape-33-dims", via_ai(shape=(1,) * 33), Gives([[1] * 33, [1] * 33, "float64",
                                                           False]))
    add(g, "shape-10**6-dims", via_ai(shape=(1,) * 10**6),
        Raises(("BufferError", "MemoryError"), (AI,)))


def _register_typestr() -> None:
    g = "typestr"
    refused = [
        ("list", [N + "f8"]), ("tuple", (N + "f8",)), ("int", 8), ("bytes", (N + "f8").encode()),
        ("none", None), ("empty", ""), ("order-only", N), ("no-size", N + "f"),
        ("no-order", "f8"), ("trailing", N + "f8x"), ("negative", N + "f-8"),
        ("huge-size", N + "f" + "9" * 30), ("zero-size", N + "f0"), ("kind-0x80", N + "\x808"),
        ("kind-0xff", N + "\xff8"), ("kind-emoji", N + "\U0001f6008"), ("order-garbage", "?f8"),
        ("int3", N + "i3"), ("float16-bytes", N + "f16"), ("complex32", N + "c32"),
        ("datetime", N + "M8"), ("timedelta", N + "m8"), ("unicode", N + "U4"),
        ("object", "|O8"), ("void", "|V8"), ("bytestring", "|S4"), ("non-native", SWAP + "f8"),
        ("bool2", "|b2"), ("nul", N + "\x008"), ("dict", {"typestr": N + "f8"}),
        ("missing", DROP), ("spaces", " " + N + "f8"),
    ]
    for name, value in refused:
        add(g, name, via_ai(typestr=value), buffer_error(AI, "'typestr'"))
    accepted = [("native-f8", N + "f8", "float64"), ("equals-f8", "=f8", "float64"),
                ("pipe-u1", "|u1", "uint8"), ("bool", "|b1", "bool"), ("i2", N + "i2", "int16"),
                ("c8", N + "c8", "complex64"), ("f2", N + "f2", "float16"),
                ("non-native-1-byte", SWAP + "i1", "int8")]
    for name, value, dtype in accepted:
        add(g, name, lambda v=value: asdlpack(Iface(ai(typestr=v))).dtype.name, Gives(dtype))
    descr = [
        ("empty-tuple", [()]), ("one-item", [("",)]), ("string", "garbage"), ("ints", [1, 2]),
        ("unhashable-name", [(["x"], "|V2")]), ("none-name", [(None, "|V2")]),
        ("structured", [("x", "|V1"), ("y", "|V1")]), ("nested", [[[[]]]]), ("dict", {"a": 1}),
    ]
    for name, value in descr:
        add(g, f"descr-{name}", via_ai(typestr="|V2", shape=(8,), descr=value),
            buffer_error(AI, ("'typestr'", "'descr'")))
    # a descr name is not a type (only a real ml_dtypes dtype is: class 9, see _register_names)
    add(g, "descr-bfloat16", lambda: asdlpack(Iface(ai(typestr="|V2", shape=(8,),
                                                       descr=[("bfloat16", "|V2")]))).dtype.name,
        buffer_error(AI, "'typestr'", "'bfloat16'", "view"))
    add(g, "descr-empty-tuple-f8", via_ai(descr=[()]), Gives([[2], [1], "float64", False]))


def _register_data() -> None:
    g = "data"
    buf = bytearray(64)
    refused = [
        ("empty-tuple", ()), ("one-item", (address(buf),)), ("three-items", (address(buf), 0, 0)),
        ("str-address", ("x", False)), ("none-address", (None, False)),
        ("float-address", (1.5, False)), ("negative-address", (-1, False)),
        ("address-2**64", (2**64, False)), ("address-2**100", (2**100, False)),
        ("null-non-empty", (0, False)),
    ]
    for name, value in refused:
        add(g, f"tuple-{name}", via_ai(data=value), buffer_error(AI, "'data'"))
    for name, value in [("int", 42), ("str", "abcdefghijklmnop"), ("list", [0] * 16),
                        ("object", object()), ("float", 1.0)]:
        add(g, f"not-a-buffer-{name}", via_ai(data=value), buffer_error(AI, "'data'"))
    add(g, "non-contiguous-memoryview", via_ai(data=memoryview(bytearray(32))[::2]),
        buffer_error(AI, "'data'"))
    add(g, "released-memoryview", lambda: summary(asdlpack(Iface(ai(data=_released())))),
        buffer_error(AI, "'data'"))
    add(g, "too-small", via_ai(data=bytearray(15)), buffer_error(AI, "outside"))
    add(g, "bytes-readonly", via_ai(data=bytes(16)), Gives([[2], [1], "float64", True]))
    add(g, "bytearray-writable", via_ai(data=bytearray(16)), Gives([[2], [1], "float64", False]))
    add(g, "tuple-readonly-flag", lambda: asdlpack(Iface(ai(data=(address(buf), True))))
        .readonly, Gives(True))
    add(g, "null-zero-size", via_ai(shape=(0,), data=(0, False)),
        Gives([[0], [1], "float64", False]))
    add(g, "offset-in-buffer", lambda: _offset_delta(8), Gives(8))
    add(g, "data-none-own-buffer", lambda: summary(asdlpack(_OwnBuffer(ai(data=None)))),
        Gives([[2], [1], "float64", False]))
    add(g, "data-none-no-buffer", via_ai(data=None), buffer_error(AI, "'data'"))

    def numpy_non_contiguous():
        np = __import__("numpy")
        return summary(asdlpack(Iface(ai(data=np.zeros(8)[::2]))))

    add(g, "numpy-non-contiguous-data", numpy_non_contiguous, buffer_error(AI, "'data'"),
        needs=["numpy"])
    # mask
    add(g, "mask-object", via_ai(mask=object()), buffer_error(AI, "'mask'"))
    add(g, "mask-false", via_ai(mask=False), buffer_error(AI, "'mask'"))
    add(g, "mask-bytes", via_ai(mask=bytes(2)), buffer_error(AI, "'mask'"))
    add(g, "mask-none", via_ai(mask=None), Gives([[2], [1], "float64", False]))
    # version
    for name, value in [("2", 2), ("4", 4), ("str", "3"), ("list", [3]), ("neg", -1),
                        ("huge", 2**100), ("true", True), ("none", None), ("dict", {3: 3})]:
        add(g, f"version-{name}", via_ai(version=value), buffer_error(AI, "'version'"))
    add(g, "version-missing", via_ai(version=DROP), Gives([[2], [1], "float64", False]))


class _OwnBuffer(bytearray):
    """A bytearray whose interface says data=None: 'my own buffer'."""

    def __init__(self, fields) -> None:
        super().__init__(16)
        self.__array_interface__ = fields


def _released():
    m = memoryview(bytearray(16))
    m.release()
    return m


def _offset_delta(offset: int) -> int:
    buf = bytearray(32)
    return asdlpack(Iface(ai(data=buf, offset=offset))).data_ptr - address(buf)


def _register_mappings() -> None:
    g = "mappings"
    for name, make in [("ordereddict", lambda: collections.OrderedDict(ai())),
                       ("dict-subclass", lambda: type("D", (dict,), {})(ai())),
                       ("defaultdict", lambda: collections.defaultdict(None, ai()))]:
        add(g, name, lambda make=make: summary(asdlpack(Iface(make()))),
            Gives([[2], [1], "float64", False]))
    # a dict subclass is read from its own storage, as NumPy reads it: a __getitem__, __iter__
    # and get() that say shape (2**40,) over the 16-byte buffer are not asked
    add(g, "dict-subclass-lying-getitem", lambda: summary(asdlpack(Iface(type("D", (dict,), {
        "__getitem__": lambda self, k: (2**40,) if k == "shape" else dict.__getitem__(self, k),
        "__iter__": lambda self: iter(list(dict.keys(self))),
        "get": lambda self, k, default=None: self[k] if k in self else default})(ai())))),
        Gives([[2], [1], "float64", False]))
    for name, value in [("list-of-items", list(ai().items())), ("str", "x"),
                        ("int", 3), ("tuple", ((2,), N + "f8")), ("set", {1})]:
        add(g, f"not-a-dict-{name}", lambda v=value: summary(asdlpack(Iface(v))),
            buffer_error(AI, "dict"))
        add(g, f"cai-not-a-dict-{name}", lambda v=value: summary(asdlpack(Iface(v, CAI))),
            buffer_error(CAI, "dict"))
    # None is "not supported" (spec §3, as for __hash__ = None): the protocol is absent
    add(g, "not-a-dict-none", lambda: summary(asdlpack(Iface(None))),
        type_error("speaks no array-exchange protocol"))
    add(g, "cai-not-a-dict-none", lambda: summary(asdlpack(Iface(None, CAI))),
        type_error("speaks no array-exchange protocol"))

    def prop(exc):
        def get(self):
            raise exc
        return lambda: asdlpack(type("P", (), {AI: property(get)})())

    add(g, "property-raises-runtime", prop(RuntimeError("boom")), buffer_error(AI, "boom"))
    add(g, "property-raises-keyerror", prop(KeyError("boom")), buffer_error(AI))
    add(g, "property-raises-buffererror", prop(BufferError("boom")), buffer_error(AI, "boom"))
    add(g, "property-raises-attributeerror", prop(AttributeError("boom")), type_error())
    add(g, "nothing", lambda: asdlpack(object()), type_error("object"))
    add(g, "int", lambda: asdlpack(3), type_error("int"))
    # __cuda_array_interface__ refusals that come before any CUDA call
    add(g, "cai-version-1", via_cai(version=1), buffer_error(CAI, "'version'"))
    add(g, "cai-version-4", via_cai(version=4), buffer_error(CAI, "'version'"))
    add(g, "cai-data-buffer", via_cai(data=bytearray(16)), buffer_error(CAI, "'data'"))
    # 0 is the legacy default stream in a CAI (numba-cuda's default stream; spec §3.4): the
    # NULL data is what is refused
    add(g, "cai-stream-0", via_cai(stream=0), buffer_error(CAI, "'data' is NULL"))
    add(g, "cai-stream-bool", via_cai(stream=True), buffer_error(CAI, "'stream'"))
    add(g, "cai-stream-str", via_cai(stream="1"), buffer_error(CAI, "'stream'"))
    add(g, "cai-stream-minus-1", via_cai(stream=-1), buffer_error(CAI, "'stream' = -1", "None"))
    add(g, "cai-stream-lying-zero", via_cai(stream=LyingInt(0)),
        buffer_error(CAI, "'data' is NULL"))
    add(g, "cai-mask", via_cai(mask=object()), buffer_error(CAI, "'mask'"))
    add(g, "cai-typestr-list", via_cai(typestr=["<f8"]), buffer_error(CAI, "'typestr'"))
    add(g, "cai-shape-huge", via_cai(shape=(2**62, 2**62)), buffer_error(CAI, "more elements"))
    add(g, "cai-shape-grows", lambda: (lambda sh: (sh.extend([Index(2, lambda: sh.extend(
        [1] * 1000)), 1]), summary(asdlpack(Iface(ai(shape=sh, data=(0, False)), CAI))))[1])([]),
        buffer_error(CAI, "'data'"))


# -- __array_struct__ built with ctypes ------------------------------------------------------------

class PyArrayInterface(ctypes.Structure):
    """NumPy's PyArrayInterface C struct (what an __array_struct__ capsule points at)."""

    _fields_ = [("two", ctypes.c_int), ("nd", ctypes.c_int), ("typekind", ctypes.c_char),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)), ("data", ctypes.c_void_p),
                ("descr", ctypes.c_void_p)]


ALIGNED, NOTSWAPPED, WRITEABLE = 0x100, 0x200, 0x400
KEEP: list = []           # ctypes memory that capsules point at, alive for the whole child run

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def capsule(address: int, name: bytes | None):
    """A PyCapsule without destructor; its name lives as long as the child."""
    if name is not None:
        name = ctypes.create_string_buffer(name)
        KEEP.append(name)
    return _capsule_new(address, name, None)


class Struct:
    """An object whose __array_struct__ is a capsule over a ctypes PyArrayInterface."""

    def __init__(self, cap) -> None:
        self.cap = cap

    @property
    def __array_struct__(self):
        return self.cap


def array_struct(*, two=2, nd=1, typekind=b"f", itemsize=8,
                 flags=ALIGNED | NOTSWAPPED | WRITEABLE, shape=(2,), strides=(8,), data=True,
                 name=None, null_shape=False):
    s = PyArrayInterface()
    buf = (ctypes.c_char * 64)()
    KEEP.extend([s, buf])
    s.two, s.nd, s.typekind, s.itemsize, s.flags = two, nd, typekind, itemsize, flags
    if shape is not None and not null_shape:
        arr = (ctypes.c_ssize_t * len(shape))(*shape)
        KEEP.append(arr)
        s.shape = ctypes.cast(arr, ctypes.POINTER(ctypes.c_ssize_t))
    if strides is not None:
        arr = (ctypes.c_ssize_t * len(strides))(*strides)
        KEEP.append(arr)
        s.strides = ctypes.cast(arr, ctypes.POINTER(ctypes.c_ssize_t))
    s.data = ctypes.addressof(buf) if data else None
    out = Struct(capsule(ctypes.addressof(s), name))
    out.s = s               # the struct itself, for cases that rewrite it while it is read
    return out


def via_struct(**fields):
    return lambda: summary(asdlpack(array_struct(**fields)))


def _register_array_struct() -> None:
    g = "array_struct"
    refused = [
        ("two-3", dict(two=3), ("'two'",)),
        ("two-0", dict(two=0), ("'two'",)),
        ("nd--1", dict(nd=-1), ("'nd'",)),
        ("nd-int-min", dict(nd=-(2**31)), ("'nd'",)),
        ("nd-2-null-shape", dict(nd=2, null_shape=True), ("'shape'",)),
        ("nd-1-null-shape", dict(null_shape=True, strides=None), ("'shape'",)),
        ("null-data", dict(data=False), ("'data'",)),
        ("typekind-0xff", dict(typekind=b"\xff"), KIND),
        ("typekind-0x80", dict(typekind=b"\x80"), KIND),
        ("typekind-nul", dict(typekind=b"\x00"), KIND),
        ("typekind-z", dict(typekind=b"z"), KIND),
        ("typekind-object", dict(typekind=b"O"), KIND),
        ("typekind-void", dict(typekind=b"V", itemsize=16), KIND),
        ("itemsize-0", dict(itemsize=0), KIND),
        ("itemsize--1", dict(itemsize=-1), KIND),
        ("itemsize--8", dict(itemsize=-8), KIND),
        ("itemsize-huge", dict(itemsize=2**31 - 1), KIND),
        ("itemsize-3", dict(itemsize=3), KIND),
        ("long-double", dict(itemsize=16, strides=(16,)), KIND),
        ("no-flags", dict(flags=0), ("'flags'",)),
        ("not-aligned", dict(flags=NOTSWAPPED | WRITEABLE), ("'flags'",)),
        ("swapped", dict(flags=ALIGNED | WRITEABLE), ("'flags'",)),
        ("strides-not-multiple", dict(strides=(4,)), ("'strides'",)),
        ("shape-negative", dict(shape=(-2,)), ("negative extent",)),
        ("shape-huge", dict(nd=2, shape=(2**62, 2**62), strides=(8, 8)), ("more elements",)),
        ("span-wraps", dict(shape=(5,), strides=(2**62,)), ()),
    ]
    for name, fields, words in refused:
        add(g, name, via_struct(**fields), buffer_error(AS, *words))
    add(g, "nd-huge", via_struct(nd=2**31 - 1), Raises(("BufferError", "MemoryError"), (AS,)))
    add(g, "nd-100000", via_struct(nd=100000), Raises(("BufferError", "MemoryError"), (AS,)))
    add(g, "not-a-capsule", lambda: asdlpack(Struct(3)), buffer_error(AS))
    add(g, "none", lambda: asdlpack(Struct(None)), type_error("speaks no array-exchange"))
    add(g, "valid", via_struct(), Gives([[2], [1], "float64", False]))
    add(g, "null-strides", via_struct(strides=None), Gives([[2], [1], "float64", False]))
    add(g, "null-data-empty", via_struct(shape=(0,), data=False),
        Gives([[0], [1], "float64", False]))
    add(g, "readonly", via_struct(flags=ALIGNED | NOTSWAPPED), Gives([[2], [1], "float64", True]))
    add(g, "one-byte-swapped", via_struct(typekind=b"u", itemsize=1, strides=(1,),
                                          flags=ALIGNED | WRITEABLE),
        Gives([[2], [1], "uint8", False]))
    add(g, "nd-0", via_struct(nd=0, shape=None, strides=None), Gives([[], [], "float64", False]))
    add(g, "named-capsule", via_struct(name=b"whatever"), Gives([[2], [1], "float64", False]))


# -- DLPack capsules built with ctypes -------------------------------------------------------------

DELETED: collections.Counter = collections.Counter()
LAST: list = [None]          # tag of the latest struct built, for the 'after' hook


def _dlc():
    import dlpack.ctypes as dlc

    return dlc


def managed(*, versioned=True, shape=(4,), strides=None, ndim=None, code=2, bits=32, lanes=1,
            flags=0, version=(1, 3), byte_offset=0, data=True, null_shape=False, deleter=True,
            device=(1, 0)):
    """A DLManagedTensor[Versioned] over 64 bytes of 0..63, whose deleter counts its calls."""
    dlc = _dlc()
    kind = dlc.DLManagedTensorVersioned if versioned else dlc.DLManagedTensor
    m = kind()
    buf = (ctypes.c_ubyte * 64)(*range(64))
    tag = len(KEEP)
    KEEP.extend([m, buf])
    t = m.dl_tensor
    t.data = ctypes.addressof(buf) if data else None
    t.device.device_type, t.device.device_id = device
    t.ndim = len(shape) if ndim is None else ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, lanes
    if not null_shape:
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        KEEP.append(arr)
        t.shape = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
    if strides is not None:
        arr = (ctypes.c_int64 * max(len(strides), 1))(*strides)
        KEEP.append(arr)
        t.strides = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = byte_offset
    if versioned:
        m.version.major, m.version.minor = version
        m.flags = flags
    if deleter:
        ftype = dlc.DLManagedTensorVersionedDeleter if versioned else dlc.DLManagedTensorDeleter

        def count(_ptr, tag=tag):
            DELETED[tag] += 1

        fn = ftype(count)
        KEEP.append(fn)
        m.deleter = fn
    LAST[0] = tag
    return m


def deleted() -> int:
    """How many times the latest struct's deleter ran, once garbage is collected."""
    gc.collect()
    return DELETED[LAST[0]]


def dl_capsule(name=b"dltensor_versioned", **fields):
    m = managed(versioned=name is None or b"versioned" in name, **fields)
    return capsule(ctypes.addressof(m), name)


def via_capsule(name=b"dltensor_versioned", kwargs=None, **fields):
    return lambda: summary(asdlpack(dl_capsule(name, **fields), **(kwargs or {})))


def _register_capsules() -> None:
    g = "capsules"
    refused = [
        ("null-shape-ndim-2", dict(shape=(2, 2), null_shape=True), ("'shape'",)),
        ("null-shape-ndim-1", dict(null_shape=True), ("'shape'",)),
        ("ndim--1", dict(ndim=-1), ("'ndim'",)),
        ("ndim-int-min", dict(ndim=-(2**31)), ("'ndim'",)),
        ("bits-0", dict(bits=0), ("'dtype'",)),
        ("bits-12", dict(code=1, bits=12), ("'dtype'",)),
        ("bits-9", dict(code=1, bits=9), ("'dtype'",)),
        ("bits-255", dict(code=1, bits=255), ("'dtype'",)),
        ("lanes-0", dict(lanes=0), ("'dtype'",)),
        ("padded-bits-16", dict(code=1, bits=16, flags=4), ("'flags'",)),
        ("padded-bits-8", dict(code=1, bits=8, flags=4), ("'flags'",)),
        ("packed-strided", dict(code=1, bits=4, shape=(4,), strides=(2,)), ("'strides'",
                                                                           "contiguous")),
        ("null-data", dict(data=False), ("'data'",)),
        ("negative-extent", dict(shape=(-4,)), ("negative extent",)),
        ("huge-shape", dict(shape=(2**62, 2**62)), ("more elements",)),
        ("byte-offset-wraps", dict(byte_offset=2**64 - 8), ("'byte_offset'",)),
        ("byte-offset-2**63", dict(byte_offset=2**63), ("'byte_offset'",)),
        ("version-2", dict(version=(2, 0)), ("'version'",)),
        ("version-max", dict(version=(2**32 - 1, 0)), ("'version'",)),
        ("device-type-99", dict(device=(99, 0)), ("'device'", "99", "DLPack 1.3")),
        ("device-type-5", dict(device=(5, 0)), ("'device'",)),
        ("device-type-0", dict(device=(0, 0)), ("'device'",)),
    ]
    for name, fields, words in refused:
        add(g, name, via_capsule(**fields), buffer_error(CAP, *words, after=1), after=deleted)
    add(g, "legacy-null-shape", via_capsule(b"dltensor", shape=(2,), null_shape=True),
        buffer_error(CAP, "'shape'", after=1), after=deleted)
    add(g, "legacy-bits-12", via_capsule(b"dltensor", code=1, bits=12),
        buffer_error(CAP, "'dtype'", after=1), after=deleted)
    add(g, "ndim-huge", via_capsule(ndim=2**31 - 1), Raises(("BufferError", "MemoryError"),
                                                            (CAP,), after=1), after=deleted)
    add(g, "ndim-100000", via_capsule(ndim=100000), Raises(("BufferError", "MemoryError"),
                                                           (CAP,), after=1), after=deleted)
    for name, cname in [("used", b"used_dltensor_versioned"), ("used-legacy", b"used_dltensor"),
                        ("foreign", b"foo"), ("empty", b""), ("null", None),
                        ("exchange-api", b"dlpack_exchange_api"), ("prefix", b"dltensor_v")]:
        add(g, f"name-{name}", lambda cname=cname: asdlpack(dl_capsule(cname)),
            buffer_error(CAP, after=0), after=deleted)
    add(g, "consumed-twice", _consume_twice, buffer_error(CAP, "consumed", after=1),
        after=deleted)
    accepted = [
        ("valid", {}, [[4], [1], "float32", False]),
        ("null-strides", dict(shape=(2, 2)), [[2, 2], [2, 1], "float32", False]),
        ("strides", dict(shape=(2, 2), strides=(1, 2)), [[2, 2], [1, 2], "float32", False]),
        ("readonly-flag", dict(flags=1), [[4], [1], "float32", True]),
        ("unknown-flag-bits", dict(flags=1 << 40), [[4], [1], "float32", False]),
        ("packed-int4", dict(code=0, bits=4, shape=(5,)), [[5], [1], "int4", False]),
        ("padded-int4", dict(code=0, bits=4, shape=(5,), flags=4), [[5], [1], "int4", False]),
        ("packed-bool1", dict(code=1, bits=1, shape=(17,)), [[17], [1], "uint1", False]),
        ("lanes-4", dict(code=2, bits=32, lanes=4, shape=(2,)), [[2], [1], "float32x4", False]),
        ("bits-24", dict(code=1, bits=24, shape=(3,)), [[3], [1], "uint24", False]),
        ("byte-offset-8", dict(code=1, bits=8, byte_offset=8, shape=(4,)),
         [[4], [1], "uint8", False]),
        ("zero-size-null-data", dict(shape=(0,), data=False), [[0], [1], "float32", False]),
        ("ndim-0", dict(shape=()), [[], [], "float32", False]),
        ("version-1-0", dict(version=(1, 0)), [[4], [1], "float32", False]),
        ("version-1-99", dict(version=(1, 99)), [[4], [1], "float32", False]),
    ]
    for name, fields, value in accepted:
        add(g, name, via_capsule(**fields), Gives(value, after=1), after=deleted)
    add(g, "null-deleter", via_capsule(deleter=False), Gives([[4], [1], "float32", False]))
    add(g, "legacy-readonly", via_capsule(b"dltensor"),
        Gives([[4], [1], "float32", True], after=1), after=deleted)
    add(g, "legacy-writable", via_capsule(b"dltensor", kwargs={"legacy_writable": True}),
        Gives([[4], [1], "float32", False]))
    add(g, "byte-offset-data", lambda: _byte_offset_bytes(8), Gives([8, 9, 10, 11]))
    # what a packed or padded tensor gives back: sizes that agree with each other
    add(g, "packed-int4-sizes", lambda: _sizes(code=0, bits=4, shape=(5,)), Gives([3, 1, 3]))
    add(g, "padded-int4-sizes", lambda: _sizes(code=0, bits=4, shape=(5,), flags=4),
        Gives([5, 1, 5]))
    add(g, "lanes-4-sizes", lambda: _sizes(code=2, bits=32, lanes=4, shape=(2,)),
        Gives([32, 16, 32]))
    add(g, "bits-24-sizes", lambda: _sizes(code=1, bits=24, shape=(3,)), Gives([9, 3, 9]))
    add(g, "packed-int4-memoryview",
        lambda: memoryview(asdlpack(dl_capsule(code=0, bits=4, shape=(5,)))),
        buffer_error(BUF, "int4"))
    add(g, "padded-int4-memoryview",
        lambda: memoryview(asdlpack(dl_capsule(code=0, bits=4, shape=(5,), flags=4))),
        buffer_error(BUF, "int4"))
    add(g, "bits-24-memoryview",
        lambda: memoryview(asdlpack(dl_capsule(code=1, bits=24, shape=(3,)))),
        buffer_error(BUF, "uint24"))
    add(g, "todict-null-shape", lambda: _todict(dl_capsule(shape=(2, 2), null_shape=True)),
        buffer_error(CAP, "'shape'"))
    add(g, "todict-ndim--1", lambda: _todict(dl_capsule(ndim=-1)), buffer_error(CAP, "'ndim'"))
    add(g, "todict-legacy-null-shape",
        lambda: _todict(dl_capsule(b"dltensor", shape=(2,), null_shape=True)),
        buffer_error(CAP, "'shape'"))
    add(g, "todict-valid", lambda: _todict(dl_capsule(shape=(2, 2)))["shape"], Gives([2, 2]))
    add(g, "todict-foreign", lambda: _todict(dl_capsule(b"foo")), buffer_error(CAP))
    add(g, "todict-does-not-consume", _todict_keeps, Gives([[4], [1], "float32", False]))


def _todict(cap):
    from dlpack import todict

    return todict(cap)


def _todict_keeps():
    cap = dl_capsule()
    _todict(cap)
    return summary(asdlpack(cap))


def _consume_twice():
    cap = dl_capsule()
    asdlpack(cap)
    return asdlpack(cap)


def _byte_offset_bytes(offset: int) -> list:
    dl = asdlpack(dl_capsule(code=1, bits=8, byte_offset=offset, shape=(4,)))
    return list(memoryview(dl))


def _sizes(**fields) -> list:
    """nbytes, itemsize and the length of the bytes a copy=True export carries."""
    dl = asdlpack(dl_capsule(**fields))
    cap = dl.__dlpack__(max_version=(1, 3), copy=True)
    copied = asdlpack(cap)
    return [dl.nbytes, dl.itemsize, copied.nbytes]


# -- buffer protocol formats -----------------------------------------------------------------------

def _testbuffer(items, **kwargs):
    import _testbuffer

    flags = kwargs.pop("flags", ())
    names = {"pil": _testbuffer.ND_PIL, "writable": _testbuffer.ND_WRITABLE,
             "fortran": _testbuffer.ND_FORTRAN}
    return _testbuffer.ndarray(items, flags=sum(names[f] for f in flags), **kwargs)


def via_buffer(make):
    return lambda: summary(asdlpack(make()))


class CStruct(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double)]


class PackedStruct(ctypes.Structure):
    _layout_ = "ms"         # what _pack_ needs from Python 3.19 (deprecated without it in 3.14)
    _pack_ = 1
    _fields_ = [("a", ctypes.c_int8), ("b", ctypes.c_int32)]


def _register_buffers() -> None:
    g = "buffers"
    fmts = [("b", "int8"), ("B", "uint8"), ("h", "int16"), ("H", "uint16"), ("i", "int32"),
            ("I", "uint32"), ("l", f"int{8 * ctypes.sizeof(ctypes.c_long)}"),
            ("L", f"uint{8 * ctypes.sizeof(ctypes.c_long)}"), ("q", "int64"), ("Q", "uint64"),
            ("n", "int64"), ("N", "uint64"), ("f", "float32"), ("d", "float64"),
            ("?", "bool"), ("c", "uint8")]
    for fmt, dtype in fmts:
        add(g, f"cast-{fmt}", lambda fmt=fmt: asdlpack(memoryview(bytearray(16)).cast(fmt))
            .dtype.name, Gives(dtype))
    add(g, "cast-P", lambda: asdlpack(memoryview(bytearray(16)).cast("P")),
        buffer_error(BUF, "'P'"))
    add(g, "cast-3d", via_buffer(lambda: memoryview(bytearray(24)).cast("B", (2, 3, 4))),
        Gives([[2, 3, 4], [12, 4, 1], "uint8", False]))
    add(g, "memoryview-step-2", via_buffer(lambda: memoryview(bytearray(16))[::2]),
        Gives([[8], [2], "uint8", False]))
    add(g, "memoryview-reversed", lambda: _reversed_delta(), Gives([[-1], 15]))
    add(g, "memoryview-released", lambda: asdlpack(_released()), buffer_error(BUF))
    add(g, "memoryview-readonly", via_buffer(lambda: memoryview(bytes(4))),
        Gives([[4], [1], "uint8", True]))
    add(g, "bytearray-empty", via_buffer(bytearray), Gives([[0], [1], "uint8", False]))
    add(g, "bytearray-resize-refused", _resize_refused, Gives("refused"))
    add(g, "mmap-close-refused", _mmap_close_refused, Gives("refused"))
    add(g, "array-d", via_buffer(lambda: array.array("d", [1, 2])),
        Gives([[2], [1], "float64", False]))
    # A str array: 'w' (Py_UCS4, Python 3.13+) where 'u' (wchar_t) is deprecated, gone in 3.16.
    unicode_code = "w" if "w" in array.typecodes else "u"
    add(g, "array-unicode", via_buffer(lambda: array.array(unicode_code, "ab")),
        buffer_error(BUF, "format"))
    ctypes_cases = [
        ("long-double", lambda: (ctypes.c_longdouble * 2)(), ("'<g'", "long double")),
        ("pointer", lambda: (ctypes.c_void_p * 2)(), ("'<P'",)),
        ("char-p", lambda: (ctypes.c_char_p * 2)(), ("format",)),
        ("struct", CStruct, ("struct",)),
        ("struct-array", lambda: (CStruct * 2)(), ("struct",)),
        # 3.11 exports it as 'B' items of 5 bytes, 3.12 as a struct format: refused either way
        ("packed-struct", PackedStruct, (("'itemsize'", "struct"),)),
        ("big-endian", lambda: (ctypes.c_int32.__ctype_be__ * 2)(), ("non-native",)),
        ("big-endian-double", lambda: (ctypes.c_double.__ctype_be__ * 2)(), ("non-native",)),
        ("py-object", lambda: (ctypes.py_object * 2)(), ("format",)),
        ("wchar", lambda: (ctypes.c_wchar * 2)(), ("format",)),
        ("bool-big-endian-struct", lambda: type("BE", (ctypes.BigEndianStructure,), {
            "_fields_": [("a", ctypes.c_int16)]})(), ("struct",)),
    ]
    for name, make, words in ctypes_cases:
        add(g, f"ctypes-{name}", lambda make=make: asdlpack(make()), buffer_error(BUF, *words))
    add(g, "ctypes-int16-2d", via_buffer(lambda: (ctypes.c_int16 * 3 * 2)()),
        Gives([[2, 3], [3, 1], "int16", False]))
    add(g, "ctypes-double-scalar", via_buffer(ctypes.c_double), Gives([[], [], "float64", False]))
    add(g, "ctypes-bool", via_buffer(lambda: (ctypes.c_bool * 3)()),
        Gives([[3], [1], "bool", False]))
    add(g, "ctypes-little-endian", via_buffer(lambda: (ctypes.c_int16.__ctype_le__ * 2)()),
        Gives([[2], [1], "int16", False]) if N == "<" else buffer_error(BUF, "non-native"))
    tb = [
        ("pil", lambda: _testbuffer(list(range(12)), shape=[3, 4], format="i", flags=["pil"]),
         ("'suboffsets'",)),
        ("multi-item", lambda: _testbuffer([(1, 2), (3, 4)], shape=[2], format="2i"),
         ("'2i'",)),
        ("struct-format", lambda: _testbuffer([(1, 2.0)], shape=[1], format="id"), ("'id'",)),
        ("padding", lambda: _testbuffer([1, 2], shape=[2], format="xb"), ("'xb'",)),
        ("non-native", lambda: _testbuffer([1.0, 2.0], shape=[2], format=SWAP + "d"),
         ("non-native",)),
        ("string", lambda: _testbuffer([b"ab"], shape=[1], format="2s"), ("'2s'",)),
        ("pascal", lambda: _testbuffer([b"ab"], shape=[1], format="p"), ("'p'",)),
        ("pointer", lambda: _testbuffer([1, 2], shape=[2], format="P"), ("'P'",)),
    ]
    for name, make, words in tb:
        add(g, f"testbuffer-{name}", lambda make=make: asdlpack(make()), buffer_error(BUF, *words),
            needs=["_testbuffer"])
    tb_ok = [
        ("fortran", lambda: _testbuffer(list(range(6)), shape=[2, 3], format="h",
                                        flags=["fortran"]), [[2, 3], [1, 2], "int16", True]),
        ("strided", lambda: _testbuffer(list(range(12)), shape=[3, 4], format="i")[::2, ::-1],
         [[2, 4], [8, -1], "int32", True]),
        ("zero-dim", lambda: _testbuffer(5, shape=[], format="q"), [[], [], "int64", True]),
        ("writable", lambda: _testbuffer([1, 2], shape=[2], format="f", flags=["writable"]),
         [[2], [1], "float32", False]),
        ("native-at", lambda: _testbuffer([1, 2], shape=[2], format="@i"),
         [[2], [1], "int32", True]),
        ("standard-equals", lambda: _testbuffer([1, 2], shape=[2], format="=q"),
         [[2], [1], "int64", True]),
    ]
    for name, make, value in tb_ok:
        add(g, f"testbuffer-{name}", via_buffer(make), Gives(value), needs=["_testbuffer"])


def _reversed_delta() -> list:
    buf = bytearray(16)
    dl = asdlpack(memoryview(buf)[::-1])
    return [list(dl.strides), dl.data_ptr - address(buf)]


def _resize_refused() -> str:
    buf = bytearray(8)
    dl = asdlpack(buf)
    try:
        buf.extend(b"x" * 4096)
    except BufferError:
        return "refused"
    return f"resized while exported ({dl!r})"


def _mmap_close_refused() -> str:
    m = mmap.mmap(-1, 4096)
    dl = asdlpack(m)
    try:
        m.close()
    except BufferError:
        return "refused"
    return f"closed while exported ({dl!r})"


# -- C exchange API, object creation, NumPy's identity, caches -------------------------------------

def _exchange_api():
    """DLPackObject's DLPackExchangeAPI (dlpack.ctypes), and the managed-tensor pointer type."""
    dlc = _dlc()
    from dlpack import DLPackObject

    return dlc.exchange_api(DLPackObject), ctypes.POINTER(dlc.DLManagedTensorVersioned)


def _allocate(shape, *, bits=64, lanes=1, code=2, ndim=None, null_shape=False, device=1):
    """Call managed_tensor_allocator: 'refused' when it returns -1 with a Buffer/MemoryError."""
    dlc = _dlc()
    api, p_mtv = _exchange_api()
    proto = dlc.DLTensor()
    proto.ndim = len(shape) if ndim is None else ndim
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = code, bits, lanes
    proto.device.device_type = device
    if not null_shape:
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        KEEP.append(arr)
        proto.shape = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
    errors = []
    on_error = _dlc().DLPackSetError(lambda _ctx, kind, msg: errors.append(kind.decode()))
    out = p_mtv()
    rc = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None, on_error)
    if rc == 0:
        t = out.contents.dl_tensor
        result = [rc, [t.shape[i] for i in range(t.ndim)], [t.strides[i] for i in range(t.ndim)]]
        out.contents.deleter(out)
        return result
    if rc == -1 and errors and errors[0] in ("BufferError", "MemoryError"):
        return "refused"
    return [rc, errors]


def _register_api() -> None:
    g = "exchange_api"
    for name, shape in [("2**58+1-f8", (2**58 + 1,)), ("2**62-squared", (2**62, 2**62)),
                        ("2**61-x4", (2**61, 4)), ("2**63-1", (2**63 - 1,)),
                        ("negative", (-1,)), ("negative-with-zero", (0, -1)),
                        ("int64-min", (-(2**63),))]:
        add(g, f"allocator-{name}", lambda shape=shape: _allocate(shape), Gives("refused"))
    add(g, "allocator-null-shape", lambda: _allocate((2, 2), null_shape=True), Gives("refused"))
    add(g, "allocator-ndim--1", lambda: _allocate((), ndim=-1), Gives("refused"))
    add(g, "allocator-bits-12", lambda: _allocate((3,), bits=12, code=1), Gives("refused"))
    add(g, "allocator-lanes-0", lambda: _allocate((3,), lanes=0), Gives("refused"))
    add(g, "allocator-cuda", lambda: _allocate((3,), device=2), Gives("refused"))
    add(g, "allocator-ok", lambda: _allocate((3, 4), bits=32), Gives([0, [3, 4], [4, 1]]))
    add(g, "allocator-zero-size", lambda: _allocate((0, 5)), Gives([0, [0, 5], [5, 1]]))
    add(g, "allocator-0-d", lambda: _allocate(()), Gives([0, [], []]))

    def from_py(obj):
        api, p_mtv = _exchange_api()
        out = p_mtv()
        return api.managed_tensor_from_py_object_no_sync(obj, ctypes.byref(out))

    add(g, "from-py-bytes", lambda: from_py(b"abc"), type_error("DLPackObject"))
    add(g, "from-py-none", lambda: from_py(None), type_error("DLPackObject"))

    def dltensor(obj):
        dlc = _dlc()
        api, _ = _exchange_api()
        return api.dltensor_from_py_object_no_sync(obj, ctypes.byref(dlc.DLTensor()))

    add(g, "dltensor-int", lambda: dltensor(3), type_error("DLPackObject"))

    def to_py_versioned(major):
        api, _p_mtv = _exchange_api()
        m = managed(version=(major, 0))
        out = ctypes.py_object()
        api.managed_tensor_to_py_object_no_sync(ctypes.pointer(m), ctypes.byref(out))
        return summary(out.value)

    add(g, "to-py-version-2", lambda: to_py_versioned(2), buffer_error("'version'", after=1),
        after=deleted)
    add(g, "to-py-version-1", lambda: to_py_versioned(1),
        Gives([[4], [1], "float32", False]))

    def to_py_null_shape():
        api, _p_mtv = _exchange_api()
        m = managed(shape=(2, 2), null_shape=True)
        out = ctypes.py_object()
        api.managed_tensor_to_py_object_no_sync(ctypes.pointer(m), ctypes.byref(out))

    add(g, "to-py-null-shape", to_py_null_shape, buffer_error("'shape'", after=1), after=deleted)


def _register_objects() -> None:
    g = "objects"

    def new():
        from dlpack import DLPackObject

        return DLPackObject.__new__(DLPackObject)

    def new_export():
        return new().__dlpack__()

    def subclass():
        from dlpack import DLPackObject

        return type("Sub", (DLPackObject,), {})

    def init():
        from dlpack import DLPackObject

        return DLPackObject()

    add(g, "new", lambda: repr(new()), type_error("asdlpack"))
    add(g, "new-export", new_export, type_error("asdlpack"))
    add(g, "init", init, type_error("asdlpack"))
    add(g, "subclass", subclass, type_error())
    add(g, "object-new", lambda: object.__new__(__import__("dlpack").DLPackObject), type_error())
    add(g, "idempotent", lambda: (lambda d: asdlpack(d) is d)(asdlpack(bytearray(4))), Gives(True))
    add(g, "unknown-kwarg", lambda: asdlpack(b"x", writable=True), type_error())


def _fake_numpy(with_slots: bool):
    """A class named ndarray in a module named numpy, speaking __array_interface__ only."""
    ns = {"__module__": "numpy", "__array_interface__": property(
        lambda self: ai(shape=(2,), data=self.buf))}
    ns["__slots__" if with_slots else "__doc__"] = ("buf",) if with_slots else "fake"
    cls = type("ndarray", (), ns)
    out = []
    for _ in range(3):
        obj = cls()
        obj.buf = bytearray(16)
        out.append(summary(asdlpack(obj)))
    return out


def _register_fake_numpy() -> None:
    g = "fake_numpy"       # its own child: NumPy must not have been imported before
    add(g, "slots", lambda: _fake_numpy(True), Gives([[[2], [1], "float64", False]] * 3))
    add(g, "dict", lambda: _fake_numpy(False), Gives([[[2], [1], "float64", False]] * 3))

    def real_after_fake():
        np = __import__("numpy")
        a = np.arange(6.0).reshape(2, 3)[:, ::2]
        dl = asdlpack(a)
        return [*summary(dl), dl.data_ptr == a.ctypes.data]

    add(g, "real-numpy-after", real_after_fake, Gives([[2, 2], [3, 2], "float64", False, True]),
        needs=["numpy"])


def _many_classes(n: int, with_api: bool) -> int:
    """Put n user classes through asdlpack; how many are still alive afterwards."""
    from dlpack import DLPackObject

    src = asdlpack(bytearray(8))
    ns = {"__dlpack__": lambda self, **kw: src.__dlpack__(**kw)}
    if with_api:
        ns["__dlpack_c_exchange_api__"] = DLPackObject.__dlpack_c_exchange_api__
    refs = []
    for i in range(n):
        cls = type(f"Provider{i}", (), dict(ns))
        asdlpack(cls())
        refs.append(weakref.ref(cls))
        del cls
    gc.collect()
    return sum(r() is not None for r in refs)


def _register_classes() -> None:
    g = "classes"
    add(g, "10**5-dlpack-classes-collected", lambda: _many_classes(10**5, False), Gives(0))
    add(g, "10**4-api-classes-collected", lambda: _many_classes(10**4, True), Gives(0))


def _register_pointers() -> None:
    g = "pointers"

    def to_pointer(obj, **kwargs):
        import dlpack.ctypes as dlc

        return dlc.to_pointer(obj, **kwargs)

    def pointer_versioned():
        buf = bytearray(b"abcd")
        p = to_pointer(buf)
        t = p.contents.dl_tensor
        result = [t.ndim, t.shape[0], p.contents.flags, t.data == address(buf)]
        p.contents.deleter(p)
        return result

    def pointer_readonly():
        data = b"abcd"
        p = to_pointer(data)
        result = [p.contents.flags & 1, bytes((ctypes.c_char * 4).from_address(
            p.contents.dl_tensor.data))]
        p.contents.deleter(p)
        return result

    def pointer_legacy_readonly():
        data = b"abcd"
        p = to_pointer(data, versioned=False)
        t = p.contents.dl_tensor
        result = [bytes((ctypes.c_char * 4).from_address(t.data)),
                  t.data == ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value]
        p.contents.deleter(p)
        return result

    def round_trip():
        buf = bytearray(b"abcd")
        p = to_pointer(buf)
        dl = asdlpack(p)
        return [summary(dl), dl.data_ptr == address(buf), bool(p)]

    def twice():
        p = to_pointer(bytearray(4))
        asdlpack(p)
        return asdlpack(p)

    def null():
        import dlpack.ctypes as dlc

        return asdlpack(ctypes.POINTER(dlc.DLManagedTensorVersioned)())

    def newer_major():
        m = managed(version=(2, 0))
        return asdlpack(ctypes.pointer(m))

    def legacy_pointer():
        m = managed(versioned=False)
        return summary(asdlpack(ctypes.pointer(m)))

    def null_shape_pointer():
        m = managed(shape=(2, 2), null_shape=True)
        return summary(asdlpack(ctypes.pointer(m)))

    add(g, "to-pointer-versioned", pointer_versioned, Gives([1, 4, 0, True]))
    add(g, "to-pointer-many", lambda: [pointer_versioned() for _ in range(200)][-1],
        Gives([1, 4, 0, True]))
    add(g, "to-pointer-readonly", pointer_readonly, Gives([1, "b'abcd'"]))
    add(g, "to-pointer-legacy-readonly-copies", pointer_legacy_readonly, Gives(["b'abcd'", False]))
    add(g, "round-trip", round_trip, Gives([[[4], [1], "uint8", False], True, False]))
    add(g, "taken-twice", twice, buffer_error(PTR))
    add(g, "null-pointer", null, buffer_error(PTR))
    add(g, "newer-major", newer_major, buffer_error(PTR, "version", after=1), after=deleted)
    add(g, "legacy-readonly", legacy_pointer, Gives([[4], [1], "float32", True], after=1),
        after=deleted)
    add(g, "null-shape", null_shape_pointer, buffer_error(PTR, "'shape'", after=1),
        after=deleted)


def _register_export() -> None:
    g = "export"

    def export(obj, **kwargs):
        from dlpack import todict

        src = obj if hasattr(obj, "__dlpack__") else asdlpack(obj)
        cap = src.__dlpack__(**kwargs)
        KEEP.append(cap)        # an unconsumed capsule owns its copy: alive while cases read it
        return todict(cap)

    def legacy_copy(**kwargs):
        data = b"abcd"
        d = export(asdlpack(data, **kwargs))
        base = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
        return [d["version"], bytes((ctypes.c_char * 4).from_address(d["data"])),
                d["data"] == base]

    add(g, "legacy-readonly-copies", legacy_copy, Gives([None, "b'abcd'", False]))
    add(g, "legacy-readonly-opt-in", lambda: legacy_copy(allow_legacy_readonly=True),
        Gives([None, "b'abcd'", True]))
    add(g, "legacy-readonly-copy-false", lambda: export(b"abcd", copy=False),
        buffer_error("__dlpack__", "copy"))
    add(g, "legacy-writable-shares", lambda: (lambda b: export(b)["data"] == address(b))(
        bytearray(4)), Gives(True))
    add(g, "versioned-readonly", lambda: (lambda d: [d["flags"] & 1, d["version"]])(
        export(b"abcd", max_version=(1, 3))), Gives([1, [1, 3]]))
    add(g, "versioned-copy-flag", lambda: export(b"abcd", max_version=(1, 3), copy=True)
        ["flags"], Gives(2))
    for stream in (0, 1, 2, 3, -2, 2**64):
        add(g, f"cpu-stream-{stream}", lambda s=stream: export(bytearray(4), stream=s),
            buffer_error("stream"))
    for name, stream in [("str", "x"), ("float", 1.5), ("list", [1])]:
        add(g, f"cpu-stream-{name}", lambda s=stream: export(bytearray(4), stream=s),
            buffer_error("stream"))
    add(g, "cpu-stream-none", lambda: export(bytearray(4), stream=None)["ndim"], Gives(1))
    for name, mv in [("str", "x"), ("int", 5), ("short", (1,)), ("nones", (None, None)),
                     ("floats", (1.5, 0.0))]:
        add(g, f"max-version-{name}", lambda mv=mv: export(bytearray(4), max_version=mv),
            type_error("max_version"))
    add(g, "max-version-2", lambda: export(bytearray(4), max_version=(2, 0))["version"],
        Gives([1, 3]))
    add(g, "max-version-0", lambda: export(bytearray(4), max_version=(0, 9))["version"],
        Gives(None))
    for name, dev in [("str", "cpu"), ("short", (1,)), ("int", 1), ("none-pair", (None, None))]:
        add(g, f"dl-device-{name}", lambda dev=dev: export(bytearray(4), dl_device=dev),
            type_error("dl_device"))
    # A copy to CUDA: refused (CudaError is a BufferError) where no CUDA driver is present.
    add(g, "dl-device-cuda", lambda: export(bytearray(4), dl_device=(2, 0)),
        Raises(("BufferError", "CudaError"), ()))
    add(g, "dl-device-cpu", lambda: export(bytearray(4), dl_device=(1, 0))["device"],
        Gives([1, 0]))

    def capsule_after_source_dropped():
        buf = bytearray(b"abcd")
        cap = asdlpack(buf).__dlpack__(max_version=(1, 3))
        del buf
        gc.collect()
        return list(memoryview(asdlpack(cap)))

    add(g, "capsule-outlives-source", capsule_after_source_dropped, Gives([97, 98, 99, 100]))
    add(g, "unconsumed-capsules", lambda: [asdlpack(bytearray(8)).__dlpack__(
        max_version=(1, 3)) for _ in range(1000)] and "ok", Gives("ok"))

    def numpy_legacy_readonly():
        np = __import__("numpy")
        a = np.from_dlpack(asdlpack(dl_capsule(b"dltensor")))
        return a.flags.writeable

    add(g, "numpy-legacy-capsule-readonly", numpy_legacy_readonly, Gives(False),
        needs=["numpy"])

    def numpy_readonly_source():
        np = __import__("numpy")
        a = np.arange(4.0)
        a.flags.writeable = False
        b = np.from_dlpack(asdlpack(a))
        return [b.flags.writeable, b.ctypes.data == a.ctypes.data]

    add(g, "numpy-readonly-stays-readonly", numpy_readonly_source, Gives([False, True]),
        needs=["numpy"])


def _register_torch() -> None:
    """Fast paths keep torch's semantics: what t.__dlpack__ refuses, asdlpack refuses (class 6)."""
    g = "torch"

    def tensor(make):
        def run():
            torch = __import__("torch")
            return summary(asdlpack(make(torch)))
        return run

    refused = [
        ("conj", lambda torch: (torch.arange(4.0) * 1j).conj(), ("conjugate",)),
        ("neg-view", lambda torch: (torch.arange(4.0) * 1j).conj().imag, ("resolve_neg()",)),
        ("requires-grad", lambda torch: torch.ones(2, requires_grad=True), ("gradient",)),
        ("sparse", lambda torch: torch.arange(4.0).to_sparse(), ("layout",)),
        ("meta", lambda torch: torch.empty(2, device="meta"), ("meta",)),
    ]
    for name, make, words in refused:
        add(g, name, tensor(make), buffer_error(*words), needs=["torch"])
    accepted = [
        ("strided", lambda torch: torch.arange(8.0)[::2], [[4], [2], "float32", False]),
        ("0-d", lambda torch: torch.tensor(3.0), [[], [], "float32", False]),
        ("zero-size", lambda torch: torch.empty(0, 3), [[0, 3], [3, 1], "float32", False]),
        ("transposed", lambda torch: torch.zeros(2, 3, dtype=torch.int16).T,
         [[3, 2], [1, 3], "int16", False]),
        ("detached", lambda torch: torch.ones(2, requires_grad=True).detach(),
         [[2], [1], "float32", False]),
    ]
    for name, make, value in accepted:
        add(g, name, tensor(make), Gives(value), needs=["torch"])

    def resolved_values():
        torch = __import__("torch")
        t = (torch.arange(3.0) * 1j).conj().resolve_conj()
        dl = asdlpack(t)
        return [dl.dtype.name, list((ctypes.c_float * 6).from_address(dl.data_ptr))[1::2]]

    add(g, "conj-resolved-values", resolved_values, Gives(["complex64", [-0.0, -1.0, -2.0]]),
        needs=["torch"])


# -- wrong values: no fallback changes the elements, names are not types, one device rule ---------

class _Typed(bytearray):
    """A bytearray (untyped bytes 'B') whose __array_interface__ describes it as typestr."""

    def __init__(self, typestr, n=16, **fields) -> None:
        super().__init__(n)
        self.__array_interface__ = dict(shape=(n // 8,), typestr=typestr, data=None, version=3,
                                        **fields)


def _typed_subclass_dict(typestr):
    """_Typed, its interface a dict subclass whose get() lies (the claim reads the storage)."""
    obj = _Typed(typestr)
    lying = type("LyingDict", (dict,), {"get": lambda self, key, default=None: (
        "|u1" if key == "typestr" else dict.get(self, key, default))})
    obj.__array_interface__ = lying(obj.__array_interface__)
    return obj


class _TypedArray(array.array):
    """An array.array (a typed buffer) with an __array_interface__ set per instance."""


def _typed_array(code, values, **fields):
    a = _TypedArray(code, values)
    a.__array_interface__ = dict(shape=(len(values),), data=None, version=3, **fields)
    return a


class _RaisingDLPack(bytearray):
    def __dlpack__(self, **kwargs):
        raise BufferError("this producer cannot export its dtype")


class _RaisingDLPackArray(array.array):
    def __dlpack__(self, **kwargs):
        raise BufferError("this producer cannot export its dtype")


class _RaisingInterface(bytearray):
    @property
    def __array_interface__(self):
        raise RuntimeError("no interface today")


class _StructAndInterface:
    """An __array_struct__ typed float64 after an __array_interface__ typed datetime64."""

    def __init__(self) -> None:
        self.__array_interface__ = ai(typestr=N + "M8")
        self.__array_struct__ = array_struct().cap


def _np_summary(make):
    def run():
        np = __import__("numpy")
        return summary(asdlpack(make(np)))
    return run


def _register_fallback() -> None:
    """Class 3: after a typed protocol refused, no fallback describes the elements as others."""
    g = "fallback"
    mv = "memoryview(obj)"
    numpy_refused = [
        ("datetime64-scalar", lambda np: np.datetime64("2020-01-01", "s"), (BUF, "'<M8[s]'", mv)),
        ("timedelta64-scalar", lambda np: np.timedelta64(5, "s"), (BUF, "'<m8[s]'", mv)),
        ("datetime64-array", lambda np: np.array(["2020-01-01"], "M8[s]"),
         (AI, "datetime", "a.view('i8')")),
        ("timedelta64-array", lambda np: np.arange(3).astype("m8[D]"), (AI, "timedelta")),
        ("bytes-scalar", lambda np: np.bytes_(b"abc"), (BUF, "'|S3'", mv)),
        ("str-scalar", lambda np: np.str_("ab"), (AI, "unicode")),
        ("void-scalar", lambda np: np.zeros(1, [("a", "<i4")])[0], (AI, "'|V4'")),
        ("structured-array", lambda np: np.zeros(3, [("a", "<i4"), ("b", "<f4")]),
         (AI, "structured", "a['name']")),
        ("object-array", lambda np: np.array([1, "x"], object), (AI, "object", "numeric")),
        ("object-scalar-array", lambda np: np.array(None), (AI, "object")),
        ("longdouble-scalar", lambda np: np.longdouble(1), (AI, "long double")),
    ]
    for name, make, words in numpy_refused:
        add(g, f"numpy-{name}", _np_summary(make), buffer_error(*words), needs=["numpy"])
    # the way out: the raw bytes, asked for explicitly
    add(g, "numpy-datetime64-memoryview",
        _np_summary(lambda np: memoryview(np.datetime64("2020-01-01", "s"))),
        Gives([[8], [1], "uint8", True]), needs=["numpy"])
    add(g, "numpy-datetime64-as-int64",
        _np_summary(lambda np: np.array(["2020-01-01"], "M8[s]").view("i8")),
        Gives([[1], [1], "int64", False]), needs=["numpy"])
    # providers of our own: a refused typestr admits only the same type
    add(g, "interface-datetime-then-bytes", via_buffer(lambda: _Typed(N + "M8")),
        buffer_error(AI, BUF, "uint8", "datetime", mv))
    add(g, "interface-dict-subclass-datetime-then-bytes", via_buffer(lambda: _typed_subclass_dict(
        N + "M8")), buffer_error(AI, BUF, "uint8", f"'{N}M8'", mv))
    add(g, "interface-float64-masked-then-bytes",
        via_buffer(lambda: _Typed(N + "f8", mask=object())),
        buffer_error(BUF, "uint8", f"'{N}f8'", mv))
    add(g, "interface-uint8-masked-then-bytes",
        via_buffer(lambda: _Typed("|u1", n=16, mask=object())),
        Gives([[16], [1], "uint8", False]))
    add(g, "interface-datetime-then-float64",
        via_buffer(lambda: _typed_array("d", [1.0, 2.0], typestr=N + "M8")),
        buffer_error(BUF, "float64", f"'{N}M8'"))
    add(g, "interface-int64-masked-then-int64",
        via_buffer(lambda: _typed_array("q", [1, 2], typestr=N + "i8", mask=object())),
        Gives([[2], [1], "int64", False]))
    add(g, "interface-garbage-typestr-then-float64",
        via_buffer(lambda: _typed_array("d", [1.0], typestr="xyz")), buffer_error(BUF, "'xyz'"))
    add(g, "interface-datetime-then-struct", lambda: summary(asdlpack(_StructAndInterface())),
        buffer_error(AS, "float64", f"'{N}M8'"))
    # a refusal that names no type admits typed protocols, not untyped bytes
    add(g, "dlpack-raises-then-bytes", via_buffer(lambda: _RaisingDLPack(8)),
        buffer_error("__dlpack__", BUF, "untyped", mv))
    add(g, "dlpack-raises-then-float64", via_buffer(lambda: _RaisingDLPackArray("d", [1.0])),
        Gives([[1], [1], "float64", False]))
    add(g, "interface-raises-then-bytes", via_buffer(lambda: _RaisingInterface(8)),
        buffer_error(AI, BUF, "untyped", mv))
    add(g, "plain-bytearray-subclass", via_buffer(lambda: type("B", (bytearray,), {})(4)),
        Gives([[4], [1], "uint8", False]))


class _NamedDtype:
    """A look-alike dtype: only its name says bfloat16."""

    name = "bfloat16"
    type = object


def _register_names() -> None:
    """Class 9: names are not types; widths a format code cannot have are structs."""
    g = "names"
    view = ("view", "ml_dtypes")
    for name, fields, words in [
        ("bfloat16-u2", [("bfloat16", "<u2")], ("'bfloat16'", *view)),
        ("bfloat16-V2", [("bfloat16", "V2")], ("'bfloat16'", *view)),
        ("int4-u1", [("int4", "u1")], ("'int4'", *view)),
        ("float8-u1", [("float8_e4m3fn", "u1")], ("'float8_e4m3fn'", *view)),
        ("float8_e5m2-u1", [("float8_e5m2", "u1")], ("'float8_e5m2'", *view)),
    ]:
        add(g, f"structured-{name}", _np_summary(lambda np, f=fields: np.zeros(3, f)),
            buffer_error(AI, *words), needs=["numpy"])

    def look_alike(dtype_of):
        def run():
            obj = Iface(ai(typestr="|V2", shape=(8,)))
            obj.dtype = dtype_of()
            return summary(asdlpack(obj))
        return run

    add(g, "look-alike-dtype", look_alike(_NamedDtype), buffer_error(AI, "'|V2'"))
    add(g, "structured-dtype-object", look_alike(
        lambda: __import__("numpy").dtype([("bfloat16", "<u2")])), buffer_error(AI, "'|V2'"),
        needs=["numpy"])
    add(g, "real-ml-dtype-object", look_alike(
        lambda: __import__("numpy").dtype(__import__("ml_dtypes").bfloat16)),
        Gives([[8], [1], "bfloat16", False]), needs=["numpy", "ml_dtypes"])

    def struct_look_alike():
        obj = array_struct(typekind=b"V", itemsize=2, strides=(2,))
        obj.dtype = _NamedDtype()
        return summary(asdlpack(obj))

    add(g, "array-struct-look-alike", struct_look_alike, buffer_error(AS, "'|V2'"))
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4"):
        add(g, f"real-{name}", _np_summary(lambda np, n=name: np.zeros(
            3, getattr(__import__("ml_dtypes"), n))), Gives([[3], [1], name, False]),
            needs=["numpy", "ml_dtypes"])
    # ctypes items whose width is not their format code's: unions, packed structs (all Pythons)
    union = ("'itemsize'", "union")
    ctypes_cases = [
        ("union-4", lambda: _Union4(), union),
        ("union-8", lambda: _Union8(), union),
        ("union-array", lambda: (_Union4 * 3)(), union),
        ("packed-4", lambda: _Packed4(), (("'itemsize'", "struct"),)),
        ("packed-8", lambda: _Packed8(), (("'itemsize'", "struct"),)),
        ("packed-8-array", lambda: (_Packed8 * 2)(), (("'itemsize'", "struct"),)),
    ]
    for name, make, words in ctypes_cases:
        add(g, f"ctypes-{name}", lambda make=make: summary(asdlpack(make())),
            buffer_error(BUF, *words))
    add(g, "ctypes-union-bytes", lambda: summary(asdlpack(memoryview(_Union8()).cast("B"))),
        Gives([[8], [1], "uint8", False]))
    add(g, "ctypes-long-8-bytes", via_buffer(lambda: (ctypes.c_long * 2)()),
        Gives([[2], [1], f"int{8 * ctypes.sizeof(ctypes.c_long)}", False]))
    # DLPack types no typestr describes exactly are refused, not mislabelled: the interface is
    # absent (AttributeError, so numpy.asarray goes on; docs/spec.md §5)
    for name, fields, words in [
        ("float128", dict(code=2, bits=128, shape=(2,)), ("float128", "long double")),
        ("int128", dict(code=0, bits=128, shape=(2,)), ("int128", "'<i16'" if N == "<" else "")),
        ("uint24", dict(code=1, bits=24, shape=(2,)), ("uint24",)),
        ("bool16", dict(code=6, bits=16, shape=(2,)), ("code6_16",)),
    ]:
        add(g, f"export-{name}", lambda f=fields: asdlpack(dl_capsule(**f)).__array_interface__,
            Raises(("AttributeError",),
                   (AI, "exact typestr", "__dlpack__", *[w for w in words if w])))
    add(g, "export-complex32-opaque",
        lambda: asdlpack(dl_capsule(code=5, bits=32, shape=(2,))).__array_interface__["descr"],
        Gives([["complex32", "|V4"]]))
    add(g, "export-float128-buffer", lambda: memoryview(asdlpack(dl_capsule(code=2, bits=128,
                                                                            shape=(2,)))),
        buffer_error(BUF, "float128"))


class _Union4(ctypes.Union):
    _fields_ = [("i", ctypes.c_int32), ("f", ctypes.c_float)]


class _Union8(ctypes.Union):
    _fields_ = [("d", ctypes.c_double), ("i", ctypes.c_int32)]


class _Packed4(ctypes.Structure):
    _layout_ = "ms"
    _pack_ = 1
    _fields_ = [("a", ctypes.c_int8), ("b", ctypes.c_int16), ("c", ctypes.c_int8)]


class _Packed8(ctypes.Structure):
    _layout_ = "ms"
    _pack_ = 1
    _fields_ = [("a", ctypes.c_int8), ("b", ctypes.c_int32), ("c", ctypes.c_int16),
                ("d", ctypes.c_int8)]


class _StorageTuple(tuple):
    """A tuple whose methods lie: readers must use its storage, as NumPy does."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        raise RuntimeError("read from storage, not __getitem__")

    def __iter__(self):
        raise RuntimeError("read from storage, not __iter__")


class _NoTruth:
    def __bool__(self):
        raise ValueError("no truth value here")


def _register_device_ids() -> None:
    """Class 11: one rule for device ids; dl_device is a tuple or list of two ints."""
    g = "device_ids"

    def export(dl, **kwargs):
        from dlpack import todict

        cap = dl.__dlpack__(max_version=(1, 3), **kwargs)
        KEEP.append(cap)
        d = todict(cap)
        return [list(d["device"]), d["data"] == dl.data_ptr, d["flags"] & 2]

    cpu7 = lambda: asdlpack(dl_capsule(device=(1, 7)))      # noqa: E731
    add(g, "import-cpu-7-is-cpu-0", lambda: list(cpu7().device), Gives([1, 0]))
    for copy in (None, False, True):
        add(g, f"cpu-7-to-cpu-0-copy-{copy}", lambda c=copy: export(cpu7(), dl_device=(1, 0),
                                                                     copy=c),
            Gives([[1, 0], copy is not True, 2 if copy else 0]))
        for dev in [(1, 5), (1, -1), (1, 2**31 - 1)]:
            add(g, f"cpu-{dev[1]}-copy-{copy}",
                lambda c=copy, d=dev: export(asdlpack(bytearray(8)), dl_device=d, copy=c),
                buffer_error("__dlpack__", "dl_device", "(1, 0)"))
    accepted = [("list", [1, 0]), ("namedtuple", collections.namedtuple("Dev", "t i")(1, 0)),
                ("storage-tuple", _StorageTuple((1, 0))), ("intenum", (_dl_cpu(), 0))]
    for name, dev in accepted:
        add(g, f"dl-device-{name}", lambda d=dev: export(asdlpack(bytearray(8)), dl_device=d),
            Gives([[1, 0], True, 0]))
    refused = [("dict", {2: 0, 1: 1}), ("dict-cpu", {1: 0, 0: 0}), ("set", {1, 0}),
               ("three", (1, 0, 0)), ("one-list", [1]), ("bytes", b"\x01\x00"),
               ("range", range(1, 3)), ("generator", (i for i in (1, 0))),
               ("bool", (True, 0)), ("float", (1.0, 0)), ("str-items", ("1", "0"))]
    for name, dev in refused:
        add(g, f"dl-device-{name}", lambda d=dev: export(asdlpack(bytearray(8)), dl_device=d),
            type_error("dl_device", "tuple or list"))


def _dl_cpu():
    from dlpack import DLDeviceType

    return DLDeviceType.kDLCPU


def _register_values() -> None:
    """Fields whose refusals named no field (an earlier hostile pass); consistent spellings."""
    g = "values"
    for name, typestr in [("4301-digits", N + "f" + "1" * 4301), ("5000-zeros-8", N + "f" +
                                                                   "0" * 5000 + "8"),
                          ("4301-digits-V", "|V" + "9" * 4301), ("f01", "|f01"), ("f1", "|f1"),
                          ("f001", "|f001")]:
        expect = (Gives([[2], [1], "float64", False]) if name == "5000-zeros-8" else
                  buffer_error(AI, "'typestr'"))
        add(g, f"typestr-{name}", via_ai(typestr=typestr), expect)

    def e5m2(typestr):
        def run():
            obj = Iface(ai(typestr=typestr, shape=(8,)))
            obj.dtype = __import__("numpy").dtype(__import__("ml_dtypes").float8_e5m2)
            return summary(asdlpack(obj))
        return run

    for typestr in ("|f1", "|f01", "<f001"):
        add(g, f"typestr-e5m2-{typestr}", e5m2(typestr), Gives([[8], [1], "float8_e5m2", False]),
            needs=["numpy", "ml_dtypes"])
    buf = bytearray(16)
    add(g, "data-flag-bool-raises", via_ai(data=(address(buf), _NoTruth())),
        buffer_error(AI, "'data'", "truth value", "ValueError"))
    add(g, "data-namedtuple", lambda: asdlpack(Iface(ai(data=collections.namedtuple(
        "Data", "address readonly")(address(buf), True)))).readonly, Gives(True))
    add(g, "data-storage-tuple", lambda: asdlpack(Iface(ai(data=_StorageTuple(
        (address(buf), False))))).data_ptr == address(buf), Gives(True))
    add(g, "data-tuple-subclass-three", via_ai(data=type("T", (tuple,), {})((1, 2, 3))),
        buffer_error(AI, "'data'"))


def _register_address() -> None:
    """dlpack.from_address: the caller's description goes through the readers' checks."""
    g = "address"
    buf = bytearray(64)

    def at(address=None, shape=(4,), dtype="float32", **kwargs):
        from dlpack import from_address

        base = ctypes.addressof(ctypes.c_char.from_buffer(buf)) if address is None else address
        return lambda: summary(from_address(base, shape, dtype, owner=buf, **kwargs))

    big = 2**62
    refused = [
        ("shape-overflow", at(shape=(big, big)), buffer_error("from_address", "'shape'",
                                                              "overflows")),
        ("shape-overflow-bytes", at(shape=(2**61,), dtype="float64"),
         buffer_error("'shape'", "overflows")),
        ("shape-negative", at(shape=(4, -1)), buffer_error("'shape'", "negative")),
        ("shape-too-big-int", at(shape=(2**64,)), buffer_error("'shape'", "64 bits")),
        ("shape-not-int", at(shape=(2.0,)), buffer_error("'shape'", "2.0")),
        ("shape-not-sequence", at(shape=4), buffer_error("'shape'", "tuple")),
        ("shape-1025-dims", at(shape=(1,) * 1025), buffer_error("'ndim'", "1025")),
        ("strides-overflow", at(shape=(2, 2), strides=(big, 1)),
         buffer_error("from_address", "address space")),
        ("strides-below-zero", at(address=64, shape=(4,), strides=(-100,)),
         buffer_error("address space")),
        ("strides-length", at(shape=(2, 2), strides=(1,)), buffer_error("'strides'", "entries")),
        ("strides-not-int", at(strides=("1",)), buffer_error("'strides'")),
        ("null-nonzero", at(address=0, shape=(4,)), buffer_error("'data'", "NULL")),
        ("address-negative", at(address=-8), buffer_error("address", "outside")),
        ("address-too-big", at(address=2**64), buffer_error("address", "outside")),
        ("address-str", at(address="0x10"), type_error("address", "ctypes.addressof")),
        ("address-bool", at(address=True), type_error("address")),
        ("address-end-of-space", at(address=2**64 - 8, shape=(4,)),
         buffer_error("address space")),
        ("dtype-unknown-name", at(dtype="float128"), buffer_error("dtype", "'float128'",
                                                                  "'float32'")),
        ("dtype-typo", at(dtype="flaot32"), buffer_error("dtype", "'flaot32'")),
        ("dtype-empty", at(dtype=""), buffer_error("dtype")),
        ("dtype-lanes-zero", at(dtype="float32x0"), buffer_error("dtype")),
        ("dtype-not-a-type", at(dtype=3.5), type_error("dtype", "3.5")),
        ("dtype-code-unknown", lambda: at(dtype=__import__("dlpack").DType(99, 8))(),
         buffer_error("dtype", "code")),
        ("dtype-zero-bits", lambda: at(dtype=__import__("dlpack").DType(2, 0))(),
         buffer_error("bits=0")),
        ("device-unknown", at(device=(99, 0)), buffer_error("device", "DLDeviceType")),
        ("device-negative-id", at(device=(1, -1)), buffer_error("device", "ordinal")),
        ("device-not-pair", at(device="cpu"), type_error("device")),
    ]
    for name, run, expect in refused:
        add(g, name, run, expect)
    add(g, "non-native-numpy-dtype",
        lambda: at(dtype=__import__("numpy").dtype(SWAP + "f4"))(),
        buffer_error("dtype", "byte order"), needs=["numpy"])
    accepted = [
        ("c-order", at(shape=(2, 2)), [[2, 2], [2, 1], "float32", False]),
        ("readonly", at(readonly=True), [[4], [1], "float32", True]),
        ("broadcast", at(shape=(3, 4), strides=(0, 1)), [[3, 4], [0, 1], "float32", False]),
        ("zero-size-null", at(address=0, shape=(0,)), [[0], [1], "float32", False]),
        ("null-as-none-zero-size", lambda: summary(__import__("dlpack").from_address(
            None, (2, 0), "int8", owner=None)), [[2, 0], [1, 1], "int8", False]),
    ]
    for name, run, value in accepted:
        add(g, name, run, Gives(value))


# -- Arrow PyCapsule interface (docs/spec.md §13): structs built with ctypes ----------------------

ARROW_IN = ("__arrow_c_array__", "__arrow_c_device_array__", "__arrow_c_stream__",
            "Arrow PyCapsule interface")


def _ap():
    from dlpack.tests import arrow_producers

    return arrow_producers


def via_arrow(make, kind="array", **producer):
    """asdlpack of a ctypes Arrow producer of make(arrow_producers) (a Col, or for streams a
    (schema Col, chunk Cols) pair), summarised."""
    def run():
        ap = _ap()
        made = make(ap)
        if kind == "stream":
            obj = ap.StreamProducer(made[0], made[1], **producer)
        elif kind == "device":
            obj = ap.DeviceProducer(made, **producer)
        else:
            obj = ap.ArrayProducer(made, **producer)
        return summary(asdlpack(obj))
    return run


def _f32(ap, items=(1.0, 2.0, 3.0, 4.0), **fields):
    """A float32 column of items, then any field overridden."""
    col = ap.primitive("f", list(items), b"f")
    for k, v in fields.items():
        setattr(col, k, v)
    return col


def _fsl(ap, size, child, **fields):
    return ap.Col(b"+w:%d" % size, fields.pop("length", child.length // max(size, 1)),
                  buffers=[None], children=[child], **fields)


def _returns(method: str, make):
    def run():
        cls = type("Producer", (), {method: lambda self, *a, **k: make(_ap())})
        return summary(asdlpack(cls()))
    return run


def _register_arrow() -> None:
    g = "arrow"
    types = [
        ("null", b"n", ("null type",)), ("bool", b"b", ("pc.cast", "bool8")),
        ("utf8", b"u", ("string",)), ("large-utf8", b"U", ("string",)),
        ("utf8-view", b"vu", ("string",)), ("binary", b"z", ("binary",)),
        ("large-binary", b"Z", ("binary",)), ("binary-view", b"vz", ("binary",)),
        ("fixed-binary", b"w:16", ("fixed_size_list<uint8>",)),
        ("decimal", b"d:10,2", ("decimal", "float64")), ("date32", b"tdD", ("int32",)),
        ("time32", b"tts", ("int32",)), ("timestamp", b"tsu:UTC", ("time", "int64")),
        ("duration", b"tDn", ("int64",)), ("interval", b"tiM", ("interval",)),
        ("list", b"+l", ("variable-size list", "fixed-size")),
        ("large-list", b"+L", ("variable-size list",)), ("list-view", b"+vl", ("list",)),
        ("map", b"+m", ("map",)), ("dense-union", b"+ud:0,1", ("union",)),
        ("sparse-union", b"+us:0", ("union",)), ("run-end", b"+r", ("run_end_decode",)),
        ("unknown", b"x", ("does not know",)), ("two-chars", b"ff", ("does not know",)),
        ("empty", b"", ("does not know",)),
    ]
    for name, fmt, words in types:
        add(g, f"type-{name}", via_arrow(lambda ap, f=fmt: ap.Col(f, 1, buffers=[None, None])),
            buffer_error("'format'", repr(fmt.decode()), *words))
    add(g, "type-nested-struct", via_arrow(lambda ap: _fsl(ap, 1, ap.Col(
        b"+s", 1, buffers=[None], children=[_f32(ap, [1.0])]))),
        buffer_error("'+s'", "struct", "field"))
    add(g, "type-fsl-of-strings", via_arrow(lambda ap: _fsl(ap, 2, ap.Col(
        b"u", 4, buffers=[None, None, None]))), buffer_error("'u'", "depth 1", "string"))
    add(g, "dictionary", via_arrow(lambda ap: _f32(ap, dictionary=True)),
        buffer_error("dictionary", "indices"))
    add(g, "format-null", via_arrow(lambda ap: _f32(ap, format=None)),
        buffer_error("'format'", "NULL"))
    for name, fmt in [("letters", b"+w:abc"), ("empty", b"+w:"), ("huge", b"+w:99999999999"),
                      ("negative", b"+w:-3")]:
        add(g, f"list-size-{name}", via_arrow(lambda ap, f=fmt: ap.Col(
            f, 1, buffers=[None], children=[_f32(ap)])), buffer_error("int32"))
    add(g, "fsl-no-children", via_arrow(lambda ap: ap.Col(b"+w:2", 1, buffers=[None])),
        buffer_error("fixed-size list", "n_children = 0"))
    add(g, "fsl-two-children", via_arrow(lambda ap: ap.Col(
        b"+w:2", 1, buffers=[None], children=[_f32(ap), _f32(ap)])),
        buffer_error("n_children = 2"))

    # record batches / structs
    add(g, "struct-two-fields", via_arrow(lambda ap: ap.Col(
        b"+s", 4, buffers=[None], children=[_f32(ap, name=b"a"), _f32(ap, name=b"b")])),
        buffer_error("2", "'a', 'b'", "select"))
    add(g, "struct-no-fields", via_arrow(lambda ap: ap.Col(b"+s", 0, buffers=[None])),
        buffer_error("0 fields", "one column"))
    add(g, "struct-one-field", via_arrow(lambda ap: ap.Col(
        b"+s", 2, offset=1, buffers=[None], children=[_f32(ap, offset=1, length=3)])),
        Gives([[2], [1], "float32", True]))
    add(g, "struct-null-row", via_arrow(lambda ap: ap.Col(
        b"+s", 3, null_count=-1, buffers=[ap.bitmap("101")], children=[_f32(ap)])),
        buffer_error("null", "fill_null"))

    # extension types
    ext = [
        ("unknown", lambda ap: _f32(ap, metadata=ap.extension(b"my.unit")),
         buffer_error("'my.unit'", "arr.storage")),
        ("bool8-on-float", lambda ap: _f32(ap, metadata=ap.extension(b"arrow.bool8")),
         buffer_error("arrow.bool8", "'f'", "int8")),
        ("tensor-on-float", lambda ap: _f32(ap, metadata=ap.extension(
            b"arrow.fixed_shape_tensor", b'{"shape":[4]}')),
         buffer_error("fixed_shape_tensor", "fixed-size list")),
        ("pairs-negative", lambda ap: _f32(ap, metadata=b"\xff\xff\xff\xff"),
         buffer_error("'metadata'", "-1", "corrupt")),
        ("pairs-huge", lambda ap: _f32(ap, metadata=(10**6).to_bytes(4, sys.byteorder)),
         buffer_error("'metadata'", "corrupt")),
        ("key-negative", lambda ap: _f32(ap, metadata=(1).to_bytes(4, sys.byteorder)
                                         + (-5).to_bytes(4, sys.byteorder, signed=True)),
         buffer_error("key 0", "corrupt")),
        ("value-huge", lambda ap: _f32(ap, metadata=(1).to_bytes(4, sys.byteorder)
                                       + (1).to_bytes(4, sys.byteorder) + b"k"
                                       + (2**30).to_bytes(4, sys.byteorder)),
         buffer_error("value 0", "corrupt")),
        ("other-keys-ignored", lambda ap: _f32(ap, metadata=ap.metadata({b"a": b"b"})),
         Gives([[4], [1], "float32", True])),
    ]
    for name, make, expect in ext:
        add(g, f"extension-{name}", via_arrow(make), expect)

    def tensor(meta: bytes, size: int = 4, rows: int = 1):
        def make(ap):
            col = _fsl(ap, size, _f32(ap, [float(i) for i in range(size * rows)]))
            col.metadata = ap.extension(b"arrow.fixed_shape_tensor", meta)
            return col
        return make

    tensors = [
        ("not-json", b"{shape", ("not JSON",)), ("list", b"[2, 2]", ("not an object",)),
        ("no-shape", b"{}", ("'shape'",)), ("shape-str", b'{"shape": "22"}', ("'shape'",)),
        ("shape-negative", b'{"shape": [-2, -2]}', ("'shape'",)),
        ("shape-bool", b'{"shape": [true, 4]}', ("'shape'",)),
        ("shape-float", b'{"shape": [2.0, 2]}', ("'shape'",)),
        ("shape-huge", b'{"shape": [%d, 1]}' % 2**64, ("'shape'",)),
        ("shape-mismatch", b'{"shape": [3, 2]}', ("6 elements", "4")),
        ("perm-dup", b'{"shape": [2, 2], "permutation": [0, 0]}', ("'permutation'",)),
        ("perm-range", b'{"shape": [2, 2], "permutation": [1, 2]}', ("'permutation'",)),
        ("perm-short", b'{"shape": [2, 2], "permutation": [0]}', ("'permutation'",)),
        ("perm-str", b'{"shape": [2, 2], "permutation": "01"}', ("'permutation'",)),
        ("names-short", b'{"shape": [2, 2], "dim_names": ["x"]}', ("'dim_names'",)),
        ("names-ints", b'{"shape": [2, 2], "dim_names": [1, 2]}', ("'dim_names'",)),
        ("deep-json", b"[" * 100000 + b"]" * 100000, ("JSON",)),
    ]
    for name, meta, words in tensors:
        add(g, f"tensor-{name}", via_arrow(tensor(meta)), buffer_error("fixed_shape_tensor",
                                                                        *words))
    add(g, "tensor-overrun-permutation", via_arrow(tensor(
        b'{"shape": [2, 1, 3, 2], "permutation": [0, 2, 3, 1]}', 12)),
        buffer_error("outside", "permutation", "PyArrow"))
    add(g, "tensor-permuted", via_arrow(tensor(
        b'{"shape": [2, 3], "permutation": [1, 0]}', 6, 2)),
        Gives([[2, 3, 2], [6, 1, 3], "float32", True]))
    add(g, "tensor-in-list", via_arrow(lambda ap: _fsl(ap, 1, tensor(b'{"shape":[4]}')(ap))),
        buffer_error("inside a list"))

    # the array's fields
    bad = [
        ("schema-released", lambda ap: ap.ArrayProducer(_f32(ap)),
         "schema", ("ArrowSchema", "released")),
        ("array-released", lambda ap: ap.ArrayProducer(_f32(ap)), "array",
         ("ArrowArray", "released")),
    ]
    for name, make, which, words in bad:
        def run(make=make, which=which):
            obj = make(_ap())
            getattr(obj, which).release = type(getattr(obj, which).release)()
            return summary(asdlpack(obj))
        add(g, name, run, buffer_error(*words))
    fields = [
        ("length-negative", dict(length=-1), ("'length'", "-1")),
        ("offset-negative", dict(offset=-4), ("'offset'", "-4")),
        ("offset-length-overflow", dict(offset=2**63 - 2, length=4), ("overflow",)),
        ("offset-huge", dict(offset=2**61), ("64 bits",)),
        ("null-count--2", dict(null_count=-2), ("'null_count'", "-2")),
        ("null-count-no-bitmap", dict(null_count=3), ("'null_count' = 3", "NULL")),
        ("n-buffers-3", dict(n_buffers=3), ("'n_buffers' = 3",)),
        ("n-buffers-1", dict(n_buffers=1), ("'n_buffers' = 1",)),
        ("n-buffers-huge", dict(n_buffers=2**62), ("'n_buffers'",)),
        ("buffers-null", dict(buffers_null=True), ("'buffers'", "NULL")),
        ("n-children-1", dict(n_children=1), ("'n_children' = 1",)),
    ]
    for name, extra, words in fields:
        add(g, f"array-{name}", via_arrow(lambda ap, extra=extra: _f32(ap, **extra)),
            buffer_error(*words))
    # A buffer shorter than offset + length says is the producer's lie: the view stays within
    # what it declared (here 24 bytes of a 16-byte array followed by spare memory).
    add(g, "array-offset-trusted", via_arrow(lambda ap: _f32(ap, offset=2)),
        Gives([[4], [1], "float32", True]))
    add(g, "data-null", via_arrow(lambda ap: ap.Col(b"f", 4, buffers=[None, None])),
        buffer_error("buffers[1]", "NULL", "4 values"))
    add(g, "data-null-empty", via_arrow(lambda ap: ap.Col(b"f", 0, buffers=[None, None])),
        Gives([[0], [1], "float32", True]))
    add(g, "data-misaligned", via_arrow(lambda ap: ap.Col(b"f", 2, buffers=[
        None, ap.Address(_ap_address(ap) + 1)])), buffer_error("aligned", "4-byte"))
    add(g, "array-dictionary-unexpected", _arrow_dictionary_array,
        buffer_error("'dictionary'", "not"))

    # nulls
    nulls = [
        ("counted", dict(null_count=1, buffers=["0111"]), buffer_error("1 null", "fill_null")),
        ("uncounted-inside", dict(null_count=-1, buffers=["1011"]),
         buffer_error("1 null", "fill_null")),
        ("uncounted-outside", dict(null_count=-1, offset=1, length=3, buffers=["01110000"]),
         Gives([[3], [1], "float32", True])),
        ("padding-bits-zero", dict(null_count=-1, length=3, buffers=["111"]),
         Gives([[3], [1], "float32", True])),
        ("count-zero-trusted", dict(null_count=0, buffers=["0000"]),
         Gives([[4], [1], "float32", True])),
        ("all-set", dict(null_count=-1, buffers=["1111"]), Gives([[4], [1], "float32", True])),
        ("many-words", dict(null_count=-1, length=200, offset=3, buffers=["1" * 150 + "0"
                                                                           + "1" * 60]),
         buffer_error("1 null", "200 values")),
        # values that cannot exist (their bytes overflow 64 bits) are refused before their
        # 2-byte validity bitmap is scanned over 2**62 bits
        ("length-overflows", dict(null_count=-1, length=2**62, buffers=["1111"]),
         buffer_error("64 bits")),
        ("offset-overflows", dict(null_count=-1, offset=2**62, buffers=["1111"]),
         buffer_error("64 bits")),
    ]
    for name, spec, expect in nulls:
        def make(ap, spec=spec):
            fields = dict(spec)
            bits = ap.bitmap(fields.pop("buffers")[0])
            length = fields.pop("length", 4)
            col = _f32(ap, [float(i) for i in range(min(fields.get("offset", 0) + length,
                                                         256))], length=length, **fields)
            col.buffers[0] = bits
            return col
        add(g, f"nulls-{name}", via_arrow(make), expect)

    # fixed-size lists: offsets at both levels, children's lengths and nulls
    def nested(ap, child_nulls=None, child_length=None):
        values = ap.primitive("h", list(range(40)), b"s", offset=1)
        values.length = 39
        if child_nulls is not None:
            values.null_count = -1
            values.buffers[0] = ap.bitmap(child_nulls)
        inner = ap.Col(b"+w:3", 12, offset=1, buffers=[None], children=[values])
        outer = ap.Col(b"+w:2", 3, offset=2, buffers=[None], children=[inner])
        if child_length is not None:
            inner.length = child_length
        return outer

    add(g, "fsl-nested-offsets", via_arrow(nested), Gives([[3, 2, 3], [6, 3, 1], "int16", True]))

    def nested_first(ap):
        dl = asdlpack(ap.ArrayProducer(nested(ap)))
        return list(memoryview(dl).cast("B").cast("h"))[:2]

    # rows from 2 (outer offset) + 1 (inner offset) inner rows in, + 1 (values offset): value
    # index ((2 * 2) + 1) * 3 + 1 = 16
    add(g, "fsl-nested-first-values", lambda: nested_first(_ap()), Gives([16, 17]))
    add(g, "fsl-child-too-short", via_arrow(lambda ap: nested(ap, child_length=9)),
        buffer_error("length 9", "fewer"))
    add(g, "fsl-child-null-inside", via_arrow(lambda ap: nested(
        ap, child_nulls="1" * 20 + "0" + "1" * 19)), buffer_error("depth 2", "null"))
    add(g, "fsl-child-null-outside", via_arrow(lambda ap: nested(
        ap, child_nulls="0" * 16 + "1" * 18 + "0" * 6)), Gives([[3, 2, 3], [6, 3, 1], "int16",
                                                               True]))
    add(g, "fsl-count-overflow", via_arrow(lambda ap: ap.Col(
        b"+w:1073741824", 2**40, buffers=[None], children=[_f32(ap)])),
        buffer_error("fewer"))
    add(g, "fsl-child-null", _arrow_null_child, buffer_error("'children'", "NULL"))
    add(g, "fsl-child-released", via_arrow(lambda ap: _fsl(ap, 2, ap.Col(
        b"f", 4, buffers=[None, ap.values("f", [1, 2, 3, 4])], released_child=True))),
        buffer_error("depth 1", "released"))
    add(g, "fsl-zero-size-lists", via_arrow(lambda ap: ap.Col(
        b"+w:0", 5, buffers=[None], children=[ap.Col(b"f", 0, buffers=[None, None])])),
        Gives([[5, 0], [1, 1], "float32", True]))
    add(g, "bool8", via_arrow(lambda ap: ap.primitive(
        "b", [1, 0, 1], b"c", metadata=ap.extension(b"arrow.bool8"))),
        Gives([[3], [1], "bool", True]))

    # devices
    devices = [
        ("cpu-id-0", dict(device_id=0), Gives([[4], [1], "float32", True])),
        ("cpu-id-7", dict(device_id=7), buffer_error("'device_id' = 7", "-1 or 0")),
        ("opencl", dict(device_type=4), buffer_error("ARROW_DEVICE_OPENCL", "host")),
        ("rocm", dict(device_type=10), buffer_error("ARROW_DEVICE_ROCM")),
        ("unknown", dict(device_type=99), buffer_error("device type 99")),
        ("cuda-id--1", dict(device_type=2, device_id=-1), buffer_error("'device_id' = -1")),
        ("cuda-id-huge", dict(device_type=2, device_id=2**40), buffer_error("'device_id'")),
    ]
    for name, fields, expect in devices:
        add(g, f"device-{name}", via_arrow(_f32, "device", **fields), expect)

    def cpu_wild_event():
        """CPU data needs no synchronisation: a sync_event pointing at unmapped memory is never
        read (a CUDA kind's is: its NULL check is all a pointer can be given)."""
        ap = _ap()
        obj = ap.DeviceProducer(_f32(ap))
        obj.device.sync_event = 0x10
        dl = asdlpack(obj)
        return [summary(dl), list(memoryview(dl).cast("B").cast("f"))]

    add(g, "device-cpu-sync-event-not-read", cpu_wild_event,
        Gives([[[4], [1], "float32", True], [1.0, 2.0, 3.0, 4.0]]))

    # what the methods return
    returns = [
        ("array-list", "__arrow_c_array__", lambda ap: [1, 2], ("pair",)),
        ("array-triple", "__arrow_c_array__", lambda ap: (1, 2, 3), ("pair",)),
        ("array-not-capsules", "__arrow_c_array__", lambda ap: ("s", "a"), ("PyCapsule",)),
        ("array-swapped", "__arrow_c_array__", lambda ap: tuple(reversed(
            ap.ArrayProducer(_f32(ap)).__arrow_c_array__())), ("'arrow_array'",
                                                               "'arrow_schema'")),
        ("device-plain-array", "__arrow_c_device_array__",
         lambda ap: ap.ArrayProducer(_f32(ap)).__arrow_c_array__(), ("'arrow_device_array'",)),
        ("stream-array", "__arrow_c_stream__",
         lambda ap: ap.ArrayProducer(_f32(ap)).__arrow_c_array__()[1], ("'arrow_array_stream'",)),
        ("stream-none", "__arrow_c_stream__", lambda ap: None, ("NoneType",)),
    ]
    for name, method, make, words in returns:
        add(g, f"returns-{name}", _returns(method, make), buffer_error(method, *words))

    def raising(exc):
        def run():
            def meth(self):
                raise exc
            return summary(asdlpack(type("P", (), {"__arrow_c_array__": meth})()))
        return run

    add(g, "method-raises", raising(RuntimeError("boom")),
        buffer_error("__arrow_c_array__", "RuntimeError", "boom"))
    add(g, "method-raises-then-stream", lambda: summary(asdlpack(type("P", (), {
        "__arrow_c_array__": lambda self: 1 / 0,
        "__arrow_c_stream__": lambda self: _ap().StreamProducer(
            _f32(_ap()), [_f32(_ap())]).__arrow_c_stream__()})())),
        Gives([[4], [1], "float32", True]))

    # streams
    streams = [
        ("one-chunk", lambda ap: (_f32(ap), [ap.Col(b"f", 0, buffers=[None, None]), _f32(ap),
                                            ap.Col(b"f", 0, buffers=[None, None])]), {},
         Gives([[4], [1], "float32", True])),
        ("no-chunks", lambda ap: (_f32(ap), []), {}, Gives([[0], [1], "float32", True])),
        ("no-chunks-fsl", lambda ap: (_fsl(ap, 3, _f32(ap)), []), {},
         Gives([[0, 3], [3, 1], "float32", True])),
        ("no-chunks-tensor", lambda ap: (tensor(b'{"shape":[2,2]}')(ap), []), {},
         Gives([[0, 2, 2], [4, 2, 1], "float32", True])),     # empty: C strides (§7)
        ("two-chunks", lambda ap: (_f32(ap), [_f32(ap), _f32(ap)]), {},
         buffer_error("more than one", "combine_chunks", "rechunk")),
        ("chunk-negative", lambda ap: (_f32(ap), [_f32(ap, length=-3)]), {},
         buffer_error("'length' = -3")),
        ("schema-error", lambda ap: (_f32(ap), []), dict(schema_error=22),
         buffer_error("get_schema", "producer failed")),
        ("schema-error-no-text", lambda ap: (_f32(ap), []), dict(schema_error=5,
                                                                 error_text=None),
         buffer_error("get_schema", "error code 5")),
        ("next-error", lambda ap: (_f32(ap), [_f32(ap), _f32(ap)]), dict(next_error=12),
         buffer_error("get_next", "producer failed")),
        ("struct-one-field", lambda ap: (ap.Col(b"+s", children=[_f32(ap)]), [ap.Col(
            b"+s", 4, buffers=[None], children=[_f32(ap)])]), {},
         Gives([[4], [1], "float32", True])),
    ]
    for name, make, producer, expect in streams:
        add(g, f"stream-{name}", via_arrow(make, "stream", **producer), expect)

    def released_stream():
        ap = _ap()
        obj = ap.StreamProducer(_f32(ap), [])
        obj.stream.release = type(obj.stream.release)()
        return summary(asdlpack(obj))

    add(g, "stream-released", released_stream, buffer_error("ArrowArrayStream", "released"))

    # releases: counted, exactly once, never while a view lives
    def releases(make, kind="array"):
        def run():
            ap = _ap()
            made = make(ap)
            obj = ap.StreamProducer(*made) if kind == "stream" else ap.ArrayProducer(made)
            seen = []
            try:
                dl = asdlpack(obj)
            except BufferError:
                gc.collect()
                return ["refused", dict(obj.released)]
            view = memoryview(dl)
            cap = dl.__dlpack__(max_version=(1, 0))
            del dl
            gc.collect()
            seen.append(dict(obj.released))
            del view
            gc.collect()
            seen.append(dict(obj.released))
            del cap
            gc.collect()
            seen.append(dict(obj.released))
            return seen
        return run

    add(g, "release-after-last-view", releases(_f32), Gives([
        {"schema": 1}, {"schema": 1}, {"schema": 1, "array": 1}]))
    add(g, "release-on-refusal", releases(lambda ap: _f32(ap, null_count=1, buffers=[
        ap.bitmap("0111"), ap.values("f", [1, 2, 3, 4])])),
        Gives(["refused", {"schema": 1, "array": 1}]))
    add(g, "release-stream-after-last-view", releases(lambda ap: (_f32(ap), [
        ap.Col(b"f", 0, buffers=[None, None]), _f32(ap)]), "stream"), Gives([
        {"schema": 1, "chunk0": 1}, {"schema": 1, "chunk0": 1},
        {"schema": 1, "chunk0": 1, "chunk1": 1, "stream": 1}]))
    add(g, "release-stream-on-refusal", releases(lambda ap: (_f32(ap), [
        _f32(ap), _f32(ap)]), "stream"), Gives(["refused", {
            "schema": 1, "chunk0": 1, "chunk1": 1, "stream": 1}]))

    def moved():
        ap = _ap()
        obj = ap.ArrayProducer(_f32(ap))
        dl = asdlpack(obj)
        return [bool(obj.schema.release), bool(obj.array.release), dl.readonly]

    add(g, "structs-moved-out", moved, Gives([False, False, True]))


def _ap_address(ap) -> int:
    return ap.values("f", [1.0, 2.0, 3.0, 4.0]).value


def _arrow_dictionary_array():
    """An array with a dictionary whose schema says none."""
    ap = _ap()
    obj = ap.ArrayProducer(_f32(ap))
    obj.array.dictionary = ctypes.pointer(ap.build_array(_f32(ap)))
    return summary(asdlpack(obj))


def _arrow_null_child():
    ap = _ap()
    col = _fsl(ap, 2, _f32(ap))
    obj = ap.ArrayProducer(col)
    obj.array.children[0] = None
    return summary(asdlpack(obj))


def _register_arrow_out() -> None:
    """DLPackObject as an Arrow producer: what it refuses, and the structs it hands out."""
    g = "arrow-out"
    A = "__arrow_c_array__"

    def export(method=A, requested=None, **fields):
        def run():
            dl = asdlpack(dl_capsule(**fields))
            args = () if requested is None else (requested(),)
            return [_ap_name(c) for c in _as_tuple(getattr(dl, method)(*args))]
        return run

    refused = [
        ("complex64", dict(code=5, bits=64), ("complex64", "real and imaginary")),
        ("bfloat16", dict(code=4, bits=16), ("bfloat16",)),
        ("float8", dict(code=2, bits=8), ("float8",)),
        ("lanes-4", dict(lanes=4, bits=32, shape=(2,)), ("lanes",)),
        ("int4", dict(code=0, bits=4, shape=(8,)), ("sub-byte",)),
        ("strided", dict(shape=(4,), strides=(2,)), ("C-contiguous", "np.ascontiguousarray")),
        ("fortran", dict(shape=(2, 3), strides=(1, 2)), ("C-contiguous",)),
        ("broadcast", dict(shape=(4,), strides=(0,)), ("C-contiguous",)),
        ("cuda-to-cpu-method", dict(device=(2, 0)), ("kDLCUDA", "__arrow_c_device_array__")),
        ("list-too-long", dict(shape=(1, 2**31)), ("2**31 - 1",)),
    ]
    for name, fields, words in refused:
        add(g, name, export(**fields), buffer_error(A, *words))
    add(g, "rocm-device-array", export("__arrow_c_device_array__", device=(10, 1)),
        Gives(["arrow_schema", "arrow_device_array"]))
    add(g, "unknown-device", export("__arrow_c_device_array__", device=(17, 0)),
        buffer_error("no device type"))
    add(g, "0-d", export(shape=()), Gives(["arrow_schema", "arrow_array"]))

    def requested(fmt: bytes, meta: bytes | None = None, name=b"arrow_schema"):
        def make():
            from dlpack.tests import arrow_producers as ap

            s = ap.build_schema(ap.Col(fmt, metadata=meta))
            return ap.capsule(s, name)
        return make

    add(g, "requested-float64", export(requested=requested(b"g")),
        buffer_error("requested_schema", "float32", "does not cast"))
    add(g, "requested-same", export(requested=requested(b"f")),
        Gives(["arrow_schema", "arrow_array"]))
    add(g, "requested-string", export(requested=requested(b"u")),
        buffer_error("requested_schema", "does not cast"))
    add(g, "requested-wrong-capsule", export(requested=requested(b"f", name=b"schema")),
        buffer_error("requested_schema", "'arrow_schema'"))
    add(g, "requested-not-capsule", export(requested=lambda: "f"),
        buffer_error("requested_schema", "PyCapsule"))

    def requested_tensor(meta: bytes):
        def make():
            from dlpack.tests import arrow_producers as ap

            s = ap.build_schema(ap.Col(b"+w:3", children=[ap.Col(b"f")], metadata=ap.extension(
                b"arrow.fixed_shape_tensor", meta)))
            return ap.capsule(s, b"arrow_schema")
        return make

    # the requested tensor metadata is checked as the reader checks it: no JSON or attribute
    # error leaks, and a shape or permutation that only compares equal (2.0, false) is refused
    for name, meta, words in [
            ("not-json", b"{shape", ("not JSON",)), ("list", b"[3]", ("not an object",)),
            ("deep", b"[" * 100000, ("not JSON",)), ("shape-float", b'{"shape": [3.0]}',
                                                     ("'shape'",)),
            ("perm-bool", b'{"shape": [3], "permutation": [false]}', ("'permutation'",))]:
        add(g, f"requested-tensor-{name}", export(requested=requested_tensor(meta),
                                                  shape=(2, 3)),
            buffer_error("requested_schema", "fixed_shape_tensor", *words))
    add(g, "requested-tensor-same", export(requested=requested_tensor(b'{"shape": [3]}'),
                                           shape=(2, 3)), Gives(["arrow_schema", "arrow_array"]))
    for method, names in [("__arrow_c_device_array__", ["arrow_schema", "arrow_device_array"]),
                          ("__arrow_c_device_stream__", ["arrow_device_array_stream"])]:
        add(g, f"kwargs-{method}", lambda m=method: getattr(asdlpack(bytearray(4)), m)(
            stream=None, future=1), Raises(("NotImplementedError",), ("future",)))
        add(g, f"kwargs-none-{method}", lambda m=method: [_ap_name(c) for c in _as_tuple(
            getattr(asdlpack(bytearray(4)), m)(stream=None))], Gives(names))


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _ap_name(capsule) -> str:
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule).decode()


for _register in (_register_sizes, _register_sequences, _register_typestr, _register_data,
                  _register_mappings, _register_array_struct, _register_capsules,
                  _register_buffers, _register_api, _register_objects, _register_fake_numpy,
                  _register_classes, _register_pointers, _register_export, _register_torch,
                  _register_fallback, _register_names, _register_device_ids, _register_values,
                  _register_address, _register_arrow, _register_arrow_out):
    _register()

# -- spec §4, §6: alignment, keep-alive, snapshots, deleters, chains, capsule kinds, UB, leaks --

def _residues(*capsules) -> list:
    """data % 256 and byte_offset of each capsule's tensor (0, 0 when the copy is aligned)."""
    KEEP.extend(capsules)       # the unconsumed capsules own their copies
    return [[d["data"] % 256, d["byte_offset"]] for d in map(_todict, capsules)]


def _register_alignment() -> None:
    """Every copy pydlpack allocates starts, first element and all, on a 256-byte boundary."""
    g = "alignment"

    def legacy_readonly(n):
        return _residues(*[asdlpack(bytes(range(k % 256)) * 3).__dlpack__() for k in range(n)])

    def readonly_7d():
        return _residues(asdlpack(memoryview(bytes(128)).cast("B", (2,) * 7)).__dlpack__())

    def copies(**kwargs):
        sources = [bytearray(1), bytearray(100), memoryview(bytearray(64))[::2],
                   Iface(ai(shape=(8, 20), strides=(512, 24), data=bytearray(4096))),
                   memoryview(bytearray(128)).cast("B", (2,) * 7)]
        return _residues(*[asdlpack(src).__dlpack__(copy=True, **kwargs) for src in sources])

    def pointer_copy():
        dlc = _dlc()
        p = dlc.to_pointer(b"abcdefgh", versioned=False)
        result = [p.contents.dl_tensor.data % 256, p.contents.dl_tensor.byte_offset]
        p.contents.deleter(p)
        return result

    def allocated(shape):
        dlc = _dlc()
        api, p_mtv = _exchange_api()
        proto = dlc.DLTensor()
        proto.ndim = len(shape)
        proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 64, 1
        proto.device.device_type = 1
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        proto.shape = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
        out = p_mtv()
        rc = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                          dlc.DLPackSetError(lambda *a: None))
        result = [rc, out.contents.dl_tensor.data % 256, out.contents.dl_tensor.byte_offset]
        out.contents.deleter(out)
        return result

    def pickled_copy():
        import pickle

        src = memoryview(bytearray(range(64)))[::8]       # sparse: pickled as a copy
        buffers: list = []
        dumped = pickle.dumps(asdlpack(src), 5, buffer_callback=buffers.append)
        back = pickle.loads(dumped, buffers=buffers)
        return [back.data_ptr % 256, list(memoryview(back))]

    add(g, "legacy-readonly-copy", lambda: legacy_readonly(64), Gives([[0, 0]] * 64))
    add(g, "legacy-readonly-copy-7-d", readonly_7d, Gives([[0, 0]]))
    add(g, "copy-true-versioned", lambda: copies(max_version=(1, 3)), Gives([[0, 0]] * 5))
    add(g, "copy-true-legacy", copies, Gives([[0, 0]] * 5))
    add(g, "copy-dl-device-cpu", lambda: copies(dl_device=(1, 0)), Gives([[0, 0]] * 5))
    add(g, "to-pointer-legacy-copy", pointer_copy, Gives([0, 0]))
    for shape in [(), (1,), (3, 5), (2,) * 7, (1,) * 40]:
        add(g, f"allocator-{len(shape)}-d", lambda shape=shape: allocated(shape),
            Gives([0, 0, 0]))
    add(g, "pickle-copy", pickled_copy, Gives([0, [0, 8, 16, 24, 32, 40, 48, 56]]))

    def numpy_copy():
        np = __import__("numpy")
        a = np.arange(24.0).reshape(4, 6)[:, ::2]
        a.flags.writeable = False
        return _residues(asdlpack(a).__dlpack__(), asdlpack(a).__dlpack__(copy=True))

    add(g, "numpy-copies", numpy_copy, Gives([[0, 0], [0, 0]]), needs=["numpy"])


def _churn() -> None:
    """Collect, then allocate and free a lot: freed memory gets reused and overwritten."""
    gc.collect()
    junk = [(ctypes.c_double * n)(*([-7.0] * n)) for n in range(1, 64) for _ in range(20)]
    junk += [bytearray(b"\xff" * n) for n in range(1, 512)]
    del junk


def _register_keepalive() -> None:
    """What a provider's interface dict keeps alive, the DLPackObject keeps alive."""
    g = "keepalive"

    class DictOwns:
        """A provider whose interface dict alone owns the memory (as NumPy scalars' do)."""

        def __init__(self, key="__ref", mapping=False) -> None:
            self.key, self.mapping = key, mapping

        @property
        def __array_interface__(self):
            buf = (ctypes.c_double * 4)(1.5, 2.5, 3.5, 4.5)
            d = {"shape": (4,), "typestr": N + "f8", "version": 3,
                 "data": (ctypes.addressof(buf), False), self.key: buf}
            return collections.ChainMap(d) if self.mapping else d

    def read(provider):
        dl = asdlpack(provider)
        _churn()
        return list(memoryview(dl))

    values = [1.5, 2.5, 3.5, 4.5]
    add(g, "dict-ref", lambda: read(DictOwns()), Gives(values))
    add(g, "dict-any-key", lambda: read(DictOwns("owner")), Gives(values))
    add(g, "mapping", lambda: read(DictOwns(mapping=True)), Gives(values))

    def write_then_read():
        dl = asdlpack(DictOwns())
        _churn()
        m = memoryview(dl)
        m[0] = 9.0
        _churn()
        return list(m)

    add(g, "dict-ref-write", write_then_read, Gives([9.0, 2.5, 3.5, 4.5]))

    def numpy_scalars():
        np = __import__("numpy")
        dls = [asdlpack(t(v)) for t, v in [(np.float64, 3.25), (np.int32, -7),
                                           (np.complex64, 1 + 2j), (np.bool_, True),
                                           (np.uint8, 200)]]
        _churn()
        return [np.from_dlpack(dl).item() for dl in dls]

    add(g, "numpy-scalars", numpy_scalars, Gives([3.25, -7, "(1+2j)", True, 200]),
        needs=["numpy"])

    def numpy_scalar_struct():
        np = __import__("numpy")
        s = np.float64(6.5)
        dl = asdlpack(Struct(s.__array_struct__))
        del s
        _churn()
        return np.from_dlpack(dl).item()

    add(g, "numpy-scalar-struct", numpy_scalar_struct, Gives(6.5), needs=["numpy"])


def _gc_hook(action):
    """Run action once, from the collector, at the next GC-tracked allocation (Python 3.11:
    inside it; later Pythons run collections between bytecodes). Returns the undo."""
    old = gc.get_threshold()
    done = []

    def callback(phase, _info):
        if phase == "start" and not done:
            done.append(1)
            action()

    def undo():
        gc.set_threshold(*old)
        gc.callbacks.remove(callback)
        return bool(done)

    gc.callbacks.append(callback)
    gc.set_threshold(1, 1, 1)       # last: nothing allocates between this and the caller's call
    return undo


def _register_snapshots() -> None:
    """A foreign struct is copied once, before any Python code or allocation; only the copy
    is read, whatever the provider changes meanwhile."""
    g = "snapshots"

    def struct_hook(mutate):
        """A bfloat16 struct whose dtype lookup (user code, asked for the type of a 'V' item)
        rewrites the struct before returning the real ml_dtypes dtype."""
        np = __import__("numpy")
        bfloat16 = np.dtype(__import__("ml_dtypes").bfloat16)
        st = array_struct(typekind=b"V", itemsize=2, shape=(3,), strides=(2,))

        class Hooked:
            __array_struct__ = st.cap

            @property
            def dtype(self):
                mutate(st.s)
                return bfloat16

        dl = asdlpack(Hooked())
        return [list(dl.shape), list(dl.strides), dl.dtype.name]

    big = (ctypes.c_ssize_t * 4096)(*([7] * 4096))
    KEEP.append(big)

    def grow(s):
        s.nd = 4096
        s.shape = ctypes.cast(big, ctypes.POINTER(ctypes.c_ssize_t))
        s.strides = ctypes.cast(big, ctypes.POINTER(ctypes.c_ssize_t))

    def null_shape(s):
        s.nd = 2
        s.shape = None

    for name, mutate in [("nd-grows", grow), ("shape-nulled", null_shape)]:
        add(g, f"array-struct-{name}-in-dtype-lookup", lambda mutate=mutate: struct_hook(mutate),
            Gives([[3], [1], "bfloat16"]), needs=["numpy", "ml_dtypes"])

    def struct_gc(mutate):
        """The struct rewritten by a collection: on Python 3.11 the one run by the allocation of
        the DLPackObject (the freelist is empty), which main made after reading the struct."""
        from dlpack import asdlpack
        from dlpack._core import _read_array_struct  # the reader itself: nothing else runs

        st = array_struct(shape=(3,), strides=(8,))
        keep = [asdlpack(bytearray(1)) for _ in range(64)]
        undo = _gc_hook(lambda: mutate(st.s))
        try:
            dl = _read_array_struct(st, st.cap)
        except BufferError as e:        # read after the change: refused for what it says now
            return "'shape' is NULL" in str(e)
        finally:
            undo()
            del keep
        return summary(dl) == [[3], [1], "float64", False]      # read before the change

    add(g, "array-struct-shape-nulled-in-gc", lambda: struct_gc(null_shape), Gives(True))

    def todict_hook(mutate):
        from dlpack import todict

        m = managed(shape=(2, 3))
        cap = capsule(ctypes.addressof(m), b"dltensor_versioned")
        undo = _gc_hook(lambda: mutate(m.dl_tensor))
        try:
            d = todict(cap)         # the first allocation after the hook is in there
        finally:
            undo()
        return [d["ndim"], d["shape"]] in ([2, (2, 3)], [2, [2, 3]])

    def todict_grow(t):
        arr = (ctypes.c_int64 * 4096)(*([5] * 4096))
        KEEP.append(arr)
        t.ndim = 4096
        t.shape = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))

    def todict_null(t):
        t.shape = None

    add(g, "todict-ndim-grows-in-gc", lambda: todict_hook(todict_grow), Gives(True))
    add(g, "todict-shape-nulled-in-gc", lambda: todict_hook(todict_null), Gives(True))

    def ndarray_retyped():
        np = __import__("numpy")
        import warnings

        from dlpack import asdlpack  # called directly: no import between hook and call

        asdlpack(np.zeros(1))       # NumPy's layout checked: the next one takes the fast path
        keep = [asdlpack(bytearray(1)) for _ in range(64)]      # the freelist is empty
        a = np.zeros(4)

        def retype():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a.dtype = np.int8
        undo = _gc_hook(retype)
        try:
            dl = asdlpack(a)
        finally:
            undo()
        del keep
        return [dl.dtype.name, list(dl.shape)] in (["float64", [4]], ["int8", [32]])

    add(g, "numpy-retyped-in-gc", ndarray_retyped, Gives(True), needs=["numpy"])


_SUBINTERPRETERS = _subinterpreters.MODULE


def _make_subinterpreter() -> None:
    """Create and destroy one subinterpreter: PyGILState_Check answers 1 from then on."""
    interpreters = importlib.import_module(_SUBINTERPRETERS)
    interpreters.destroy(interpreters.create())


def _register_deleters() -> None:
    """Deleters take the GIL whatever the thread holds (its own child: a subinterpreter is
    made first, and stays made for the rest of the group)."""
    g = "deleters"

    def without_gil(versioned, in_thread):
        import threading

        _make_subinterpreter()
        dlc = _dlc()
        dl = asdlpack(bytearray(b"abcdefgh"))
        gone = weakref.ref(dl)
        p = dlc.to_pointer(dl, versioned=versioned)
        del dl              # the tensor holds the only reference now
        call = lambda: p.contents.deleter(p)      # ctypes calls it without the GIL   # noqa: E731
        if in_thread:
            t = threading.Thread(target=call)
            t.start()
            t.join()
        else:
            call()
        return gone() is None

    for versioned in (True, False):
        for in_thread in (False, True):
            name = f"{'versioned' if versioned else 'legacy'}-{'thread' if in_thread else 'main'}"
            add(g, f"no-gil-after-subinterpreter-{name}",
                lambda v=versioned, t=in_thread: without_gil(v, t), Gives(True),
                needs=[_SUBINTERPRETERS])

    def numpy_consumer():
        np = __import__("numpy")
        _make_subinterpreter()
        a = np.from_dlpack(asdlpack(bytearray(b"abcd")))
        value = bytes(a)
        del a
        gc.collect()
        return value.decode()

    add(g, "numpy-consumer-after-subinterpreter", numpy_consumer, Gives("abcd"),
        needs=["numpy", _SUBINTERPRETERS])


def _register_chains() -> None:
    """Freeing a deep chain of views does not recurse without bound (the trashcan)."""
    g = "chains"
    depth = 150_000

    def chain(step):
        x = asdlpack(bytearray(b"abcd"))
        for i in range(depth):
            x = step(x, i)
        result = list(memoryview(x))
        del x
        return result

    steps = [
        ("versioned", lambda x, i: asdlpack(x.__dlpack__(max_version=(1, 3)))),
        ("legacy", lambda x, i: asdlpack(x.__dlpack__(), legacy_writable=True)),
        ("shared", lambda x, i: asdlpack(x, allow_legacy_readonly=bool(i % 2))),
        ("pointer", lambda x, i: asdlpack(_dlc().to_pointer(x))),
    ]
    for name, step in steps:
        add(g, f"{name}-{depth}", lambda step=step: chain(step), Gives([97, 98, 99, 100]))
    add(g, f"numpy-{depth}", lambda: chain(
        lambda x, i: asdlpack(__import__("numpy").from_dlpack(x))), Gives([97, 98, 99, 100]),
        needs=["numpy"])
    # no deleter in this one: each link is a provider (an array over a buffer) held as base
    add(g, f"numpy-asarray-{depth}", lambda: chain(
        lambda x, i: asdlpack(__import__("numpy").asarray(x))), Gives([97, 98, 99, 100]),
        needs=["numpy"])


_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _register_capsule_kinds() -> None:
    """A capsule's destructor reads the struct it was made with, whatever its name says now."""
    g = "capsule_kinds"

    def renamed(versioned, to):
        dl = asdlpack(dl_capsule(), legacy_writable=True)
        cap = dl.__dlpack__(max_version=(1, 3) if versioned else None)
        name = ctypes.create_string_buffer(to)
        KEEP.append(name)
        _set_name(cap, name)
        del cap, dl
        return deleted()

    add(g, "versioned-renamed-dltensor", lambda: renamed(True, b"dltensor"), Gives(1))
    add(g, "legacy-renamed-dltensor-versioned", lambda: renamed(False, b"dltensor_versioned"),
        Gives(1))
    add(g, "versioned-renamed-twice", lambda: renamed(True, b"dltensor_versioned"), Gives(1))

    def consumed(versioned, to):
        """A consumer renamed it used (then must call the deleter itself: it does here)."""
        dl = asdlpack(dl_capsule(), legacy_writable=True)
        cap = dl.__dlpack__(max_version=(1, 3) if versioned else None)
        kind = _dlc().DLManagedTensorVersioned if versioned else _dlc().DLManagedTensor
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        m = kind.from_address(get(cap, b"dltensor_versioned" if versioned else b"dltensor"))
        name = ctypes.create_string_buffer(to)
        KEEP.append(name)
        _set_name(cap, name)
        del cap, dl
        before = deleted()
        m.deleter(ctypes.pointer(m))
        return [before, deleted()]

    add(g, "versioned-used", lambda: consumed(True, b"used_dltensor_versioned"), Gives([0, 1]))
    add(g, "legacy-used", lambda: consumed(False, b"used_dltensor"), Gives([0, 1]))
    add(g, "versioned-foreign-name", lambda: consumed(True, b"taken"), Gives([0, 1]))


def _register_strides() -> None:
    """No undefined behaviour from odd but legal inputs: NULL shapes of 0-d tensors, strides
    of extent-0/1 dimensions (normalised once, at import), spans near 2**63."""
    g = "strides"
    add(g, "0-d-null-shape", via_capsule(shape=(), null_shape=True),
        Gives([[], [], "float32", False], after=1), after=deleted)
    add(g, "0-d-null-shape-legacy", via_capsule(b"dltensor", shape=(), null_shape=True),
        Gives([[], [], "float32", True], after=1), after=deleted)
    add(g, "0-d-null-shape-pointer",
        lambda: summary(asdlpack(ctypes.pointer(managed(shape=(), null_shape=True)))),
        Gives([[], [], "float32", False], after=1), after=deleted)
    add(g, "0-d-null-shape-todict",
        lambda: _todict(dl_capsule(shape=(), null_shape=True))["shape"], Gives([]))

    def exported(fields, what):
        dl = asdlpack(dl_capsule(**fields))
        if what == "buffer":
            m = memoryview(dl)
            return [list(m.shape), list(m.strides)]
        if what == "ai":
            return dl.__array_interface__["strides"]
        return summary(dl)

    odd = [
        ("extent-1-stride-2**62", dict(shape=(1, 2), strides=(2**62, 1))),
        ("extent-1-stride-int64-min", dict(shape=(1, 2), strides=(-(2**63), 1))),
        ("extent-1-stride-int64-max", dict(shape=(2, 1), strides=(1, 2**63 - 1))),
    ]
    for name, fields in odd:
        add(g, f"{name}-summary", lambda f=fields: exported(f, "summary"),
            Gives([fields["shape"], [2, 1] if fields["shape"] == (1, 2) else [1, 1],
                   "float32", False]))
        add(g, f"{name}-buffer", lambda f=fields: exported(f, "buffer"),
            Gives([list(fields["shape"]), [8, 4] if fields["shape"] == (1, 2) else [4, 4]]))
        add(g, f"{name}-array-interface", lambda f=fields: exported(f, "ai"), Gives(None))
    empty = dict(shape=(0, 3), strides=(2**62, 2**62 + 1))
    add(g, "extent-0-huge-strides-summary", lambda: exported(empty, "summary"),
        Gives([[0, 3], [3, 1], "float32", False]))
    add(g, "extent-0-huge-strides-buffer", lambda: exported(empty, "buffer"),
        Gives([[0, 3], [12, 4]]))
    add(g, "ai-extent-1-byte-stride-2**62", via_ai(shape=(1,), strides=(2**62,)),
        Gives([[1], [1], "float64", False]))
    add(g, "ai-extent-1-odd-byte-stride", via_ai(shape=(1,), strides=(3,)),
        Gives([[1], [1], "float64", False]))
    add(g, "ai-extent-0-odd-byte-stride", via_ai(shape=(0, 2), strides=(3, 5)),
        Gives([[0, 2], [2, 1], "float64", False]))
    add(g, "ai-span-2**63", via_ai(shape=(2,), strides=(-(2**63),), data=(2**63 + 64, False)),
        buffer_error(AI, "outside"))

    def pickled(fields, protocol):
        import pickle

        dl = asdlpack(dl_capsule(**fields))
        back = pickle.loads(pickle.dumps(dl, protocol))
        return [summary(back), list(memoryview(back).cast("B"))[:8]]

    for protocol in (2, 5):
        add(g, f"pickle-extent-1-int64-min-protocol-{protocol}",
            lambda p=protocol: pickled(dict(code=1, bits=8, shape=(1, 4),
                                            strides=(-(2**63), 1)), p),
            Gives([[[1, 4], [4, 1], "uint8", False], [0, 1, 2, 3]]))

    def forged(strides):
        from dlpack._core import _rebuild

        return summary(_rebuild(bytearray(8), 1, 8, 1, (1, 8), strides, 0, 0))

    add(g, "rebuild-extent-1-int64-min", lambda: forged((-(2**63), 1)),
        Gives([[1, 8], [8, 1], "uint8", False]))
    add(g, "rebuild-int64-min-extent-8", lambda: forged((8, -(2**63))),
        buffer_error("pickle", "outside"))


def _register_internal() -> None:
    """No internal exception reaches users; unavailable interfaces are absent attributes; no
    blank DLPackObject can be had, even by a finalizer that runs while asdlpack allocates."""
    g = "internal"

    class Returns:
        def __init__(self, value) -> None:
            self.value = value

        def __dlpack__(self, **kwargs):
            return self.value

    for name, value in [("int", 3), ("none", None), ("str", "dltensor"), ("bytes", b"x")]:
        add(g, f"todict-dlpack-returns-{name}", lambda v=value: _todict(Returns(v)),
            buffer_error("__dlpack__ returned a", "not a PyCapsule"))
        add(g, f"asdlpack-dlpack-returns-{name}", lambda v=value: asdlpack(Returns(v)),
            buffer_error("__dlpack__ returned a", "not a PyCapsule"))

    unavailable = [("int4", dict(code=0, bits=4, shape=(5,))),
                   ("uint1", dict(code=1, bits=1, shape=(9,))),
                   ("lanes-4", dict(code=2, bits=32, lanes=4, shape=(2,)))]
    for name, fields in unavailable:
        add(g, f"hasattr-array-interface-{name}",
            lambda f=fields: hasattr(asdlpack(dl_capsule(**f)), AI), Gives(False))
        add(g, f"getattr-array-interface-{name}",
            lambda f=fields: getattr(asdlpack(dl_capsule(**f)), AI),
            Raises(("AttributeError",), (AI,)))

    def blank_exports():
        """A finalizer that runs while asdlpack allocates cannot make a DLPackObject (each
        export of one it made would be tried)."""
        import pickle

        from dlpack import DLPackObject, asdlpack, todict  # no import between the allocations

        got: list = []

        class Grab:
            def __del__(self):
                try:
                    got.append(DLPackObject.__new__(DLPackObject))
                except TypeError:
                    pass

        keep = [asdlpack(bytearray(1)) for _ in range(64)]      # the freelist is empty
        old = gc.get_threshold()
        gc.set_threshold(1, 1, 1)
        try:
            for _ in range(200):
                grab = Grab()
                grab.cycle = grab           # cyclic garbage: only a collection frees it
                del grab
                keep.append(asdlpack(bytearray(1)))
        finally:
            gc.set_threshold(*old)
        gc.collect()
        api, p_mtv = _exchange_api()
        exports = [
            lambda b: b.__dlpack__(), lambda b: b.__dlpack__(max_version=(1, 3)),
            lambda b: b.__dlpack__(copy=True), lambda b: b.__dlpack_device__(),
            memoryview, lambda b: b.__array_interface__, lambda b: b.__cuda_array_interface__,
            pickle.dumps, asdlpack, todict, lambda b: _dlc().to_pointer(b),
            lambda b: api.managed_tensor_from_py_object_no_sync(b, ctypes.byref(p_mtv())),
            lambda b: api.dltensor_from_py_object_no_sync(b, ctypes.byref(_dlc().DLTensor())),
        ]
        outcomes = set()
        for blank in got:
            for export in exports:
                try:
                    export(blank)
                    outcomes.add("exported")
                except Exception as e:      # any other outcome is reported
                    ok = isinstance(e, TypeError) and "asdlpack" in str(e)
                    outcomes.add("refused" if ok else f"{type(e).__name__}: {e}")
        return sorted(outcomes)     # none: Python cannot make one, not even then

    add(g, "blank-object-exports", blank_exports, Gives([]))


def _register_api_pointers() -> None:
    """Every exchange-API entry point checks every pointer: -1 with an exception set."""
    g = "exchange_api"

    def call(field, argtypes, *args):
        """An entry point called through a PYFUNCTYPE of raw pointers (NULLs get through)."""
        from dlpack import DLPackObject

        api = _dlc().exchange_api(DLPackObject)
        address = ctypes.cast(getattr(api, field), ctypes.c_void_p).value
        return ctypes.PYFUNCTYPE(ctypes.c_int, *argtypes)(address)(*args)

    obj = ctypes.py_object
    vp = ctypes.c_void_p
    out = lambda: ctypes.byref(ctypes.c_void_p())           # noqa: E731
    dl = lambda: asdlpack(bytearray(4))                     # noqa: E731
    add(g, "from-py-null-out", lambda: call("managed_tensor_from_py_object_no_sync",
                                            (obj, vp), dl(), None),
        type_error("output pointer"))
    add(g, "from-py-null-object", lambda: call("managed_tensor_from_py_object_no_sync",
                                               (vp, vp), None, out()),
        type_error("NULL"))
    add(g, "dltensor-null-out", lambda: call("dltensor_from_py_object_no_sync", (obj, vp),
                                             dl(), None),
        type_error("output pointer"))
    add(g, "dltensor-null-object", lambda: call("dltensor_from_py_object_no_sync", (vp, vp),
                                                None, ctypes.byref(_dlc().DLTensor())),
        type_error("NULL"))

    def to_py_null_out():
        m = managed()
        return call("managed_tensor_to_py_object_no_sync", (vp, vp),
                    ctypes.addressof(m), None)

    add(g, "to-py-null-out", to_py_null_out, Raises(("TypeError",), ("output pointer",), after=1),
        after=deleted)
    add(g, "to-py-null-tensor", lambda: call("managed_tensor_to_py_object_no_sync", (vp, vp),
                                             None, out()),
        buffer_error("NULL"))
    add(g, "stream-null-out", lambda: call("current_work_stream",
                                           (ctypes.c_int32, ctypes.c_int32, vp), 2, 0, None),
        type_error("output pointer"))
    add(g, "stream-cpu", lambda: (lambda o: [call(
        "current_work_stream", (ctypes.c_int32, ctypes.c_int32, vp), 1, 0, ctypes.byref(o)),
        o.value])(ctypes.c_void_p(7)), Gives([0, None]))

    def allocator(proto, out, set_error):
        dlc = _dlc()
        api, _ = _exchange_api()
        fn = ctypes.CFUNCTYPE(ctypes.c_int, vp, vp, vp, vp)(
            ctypes.cast(api.managed_tensor_allocator, vp).value)
        errors: list = []
        cb = dlc.DLPackSetError(lambda _ctx, kind, msg: errors.append(kind.decode()))
        KEEP.append(cb)
        t = dlc.DLTensor()
        t.ndim, t.device.device_type = 0, 1
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
        rc = fn(ctypes.addressof(t) if proto else None,
                ctypes.addressof(out) if out is not None else None,
                None, ctypes.cast(cb, vp).value if set_error else None)
        if rc == 0:
            out.contents.deleter(out)
        return [rc, errors]

    add(g, "allocator-null-proto", lambda: allocator(False, _mtv_out(), True),
        Gives([-1, ["BufferError"]]))
    add(g, "allocator-null-out", lambda: allocator(True, None, True),
        Gives([-1, ["BufferError"]]))
    add(g, "allocator-null-everything", lambda: allocator(False, None, False), Gives([-1, []]))
    add(g, "allocator-no-callback-ok", lambda: allocator(True, _mtv_out(), False),
        Gives([0, []]))


def _mtv_out():
    """An output slot for a DLManagedTensorVersioned pointer."""
    return ctypes.POINTER(_dlc().DLManagedTensorVersioned)()


# -- third round (docs/spec.md §2, §3.1, §4, §7): lying names, copy spellings, owners' bounds,
# wrapped provider errors, subinterpreter releases, producers that abort on their own export --

def _liar_str(claims: str) -> type:
    """A str subclass equal to everything, hashing as ``claims`` does."""
    return type("Liar", (str,), {"__hash__": lambda self: hash(claims),
                                 "__eq__": lambda self, other: True})


def _release_in_subinterpreter(kind: str) -> bool:
    """A subinterpreter, holding its GIL (ctypes.PYFUNCTYPE), calls a main-interpreter export's
    deleter or Arrow release; True when the view was released (a deadlock times out)."""
    from dlpack import asdlpack

    dl = asdlpack(bytearray(b"abcdefgh"))
    gone = weakref.ref(dl)
    if kind == "arrow":
        _, array = dl.__arrow_c_array__()
        KEEP.append(array)
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        address = get(array, b"arrow_array")
        release = ctypes.c_void_p.from_address(address + 64).value     # ArrowArray.release
    else:
        p = _dlc().to_pointer(dl, versioned=kind == "versioned")
        address = ctypes.cast(p, ctypes.c_void_p).value
        release = ctypes.cast(p.contents.deleter, ctypes.c_void_p).value
    del dl
    interpreters, interp = _subinterpreters.create()
    try:
        _subinterpreters.run(interpreters, interp, "import ctypes\nctypes.PYFUNCTYPE(None, "
                             f"ctypes.c_void_p)({release})({address})\n")
    finally:
        interpreters.destroy(interp)
    return gone() is None


def _stream_null_in_subinterpreter() -> bool:
    """A subinterpreter, holding its GIL, calls the exchange API's current_work_stream with a
    NULL output: True when the TypeError reaches it there (a deadlock times out)."""
    from dlpack import DLPackObject

    api = _dlc().exchange_api(DLPackObject)
    stream = ctypes.cast(api.current_work_stream, ctypes.c_void_p).value
    interpreters, interp = _subinterpreters.create()
    try:
        _subinterpreters.run(interpreters, interp, "import ctypes\nctypes.PYFUNCTYPE("
                             "ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)"
                             f"({stream})(1, 0, None)\n")
    except Exception as e:
        return "output pointer is NULL" in str(e)
    finally:
        interpreters.destroy(interp)
    return False


def _register_third_round() -> None:
    g = "third-round"
    buf = bytearray(24)

    def at(shape=(4,), dtype="float32", **kwargs):
        from dlpack import from_address

        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        return lambda: summary(from_address(base, shape, dtype, owner=buf, **kwargs))

    def poisoned_name():
        from dlpack import from_address

        space = ctypes.create_string_buffer(256)
        first = from_address(ctypes.addressof(space), (4,), _liar_str("int8")("float32x4"),
                             owner=space)
        then = from_address(ctypes.addressof(space), (4,), "int8", owner=space)
        return [first.dtype.name, first.nbytes, then.dtype.name, then.nbytes]

    def export(data, **kwargs):
        from dlpack import asdlpack

        return lambda: asdlpack(data).__dlpack__(**kwargs) and None

    def np_bool(value):
        return __import__("numpy").bool_(value)

    def legacy(name, protocol):
        import dlpack

        def broken(self):
            raise RuntimeError("the property broke")

        provider = type("Provider", (), {protocol: property(broken)})()
        return lambda: getattr(dlpack, name)(provider)

    def tf_tensor(kind):
        def run():
            tf = __import__("tensorflow")
            from dlpack import asdlpack

            return asdlpack(tf.constant(["a", "b"]) if kind == "string"
                            else tf.Variable([1.0]).handle)
        return run

    add(g, "dtype-str-subclass-lies", poisoned_name, Gives(["float32x4", 64, "int8", 4]))
    add(g, "dtype-numpy-negative-subarray", lambda: at(dtype=(__import__("numpy").int32, -1))(),
        type_error("from_address", "dtype", "ValueError"), needs=["numpy"])
    add(g, "address-owner-overrun", at(shape=(600,)),
        buffer_error("from_address", "2376 bytes past the end", "bytearray, 24 bytes"))
    add(g, "address-byte-strides-as-elements", at(shape=(3,), strides=(8,)),
        buffer_error("past the end", "strides are in elements"))
    add(g, "address-before-owner", at(shape=(2,), strides=(-1,)),
        buffer_error("before the start"))
    add(g, "address-inside-owner", at(shape=(6,)), Gives([[6], [1], "float32", False]))
    for name, value, needs in (("false", lambda: False, ()), ("zero", lambda: 0, ()),
                               ("numpy-false", lambda: np_bool(False), ("numpy",))):
        add(g, f"copy-{name}-gpu-move",
            lambda v=value: export(bytearray(4), dl_device=(2, 0), copy=v())(),
            buffer_error("__dlpack__", "but copy=False"), needs=needs)
        add(g, f"copy-{name}-legacy-readonly", lambda v=value: export(b"abcd", copy=v())(),
            buffer_error("__dlpack__", "with copy=False"), needs=needs)
    for bad in (2, -1, 1.5, "no"):
        add(g, f"copy-{bad!r}", export(bytearray(4), copy=bad), type_error("copy", repr(bad)))
    for name, protocol in (("asdlpack_dlpack", "__dlpack__"),
                           ("asdlpack_array_interface_v3", "__array_interface__"),
                           ("asdlpack_cuda_array_interface", "__cuda_array_interface__")):
        add(g, f"legacy-{name}-raising-property", legacy(name, protocol),
            buffer_error(f"{protocol}: RuntimeError: the property broke"))
    for kind in ("versioned", "legacy", "arrow"):
        add("third-round-subinterpreter", f"{kind}-release-holding-its-gil",
            lambda k=kind: _release_in_subinterpreter(k), Gives(True), needs=[_SUBINTERPRETERS])
    add("third-round-subinterpreter", "stream-null-output-holding-its-gil",
        _stream_null_in_subinterpreter, Gives(True), needs=[_SUBINTERPRETERS])
    for kind in ("string", "resource"):
        add("third-round-tensorflow", f"tensorflow-{kind}-tensor", tf_tensor(kind),
            buffer_error(f"TensorFlow cannot export a {kind} tensor"), needs=["tensorflow"])


for _register in (_register_alignment, _register_keepalive, _register_snapshots,
                  _register_deleters, _register_chains, _register_capsule_kinds,
                  _register_strides, _register_internal, _register_api_pointers):
    _register()
_register_third_round()

# -- Appended block: device bitmaps and sync_event order, callbacks run while a refusal is set,
# blank objects, requested_schema levels, the exchange API before Arrow, view-type names. ------

def _on_fake_cuda(run):
    """Run ``run(fake)`` with the fake CUDA driver installed (tests/fake_cuda.py)."""
    def case():
        from dlpack.tests import fake_cuda

        fake = fake_cuda.install()
        try:
            return run(fake)
        finally:
            fake_cuda.uninstall()
    return case


def _cuda_bitmap_column(fake, bitmap: int, kind=2, null_count=-1, event=None):
    """Three float32 in fake device memory (pinned for kind 3) with the bitmap pointer given."""
    ap = _ap()
    values = (ctypes.c_float * 3)(1, 2, 3)
    KEEP.append(values)
    ptr = fake.device_array(bytes(values), device=0) if kind == 2 else fake.pinned(values)
    col = ap.primitive("f", [0, 0, 0], b"f", null_count=null_count)
    col.buffers = [ap.Address(bitmap), ap.Address(ptr)]
    return ap.DeviceProducer(col, kind, 0, event)


def _register_device_bitmaps() -> None:
    """The Arrow reader reads no device memory with the CPU, and no bitmap before the
    producer's sync_event (docs/spec.md §13.1)."""
    g = "arrow-device"

    def unmapped(fake):                 # a device pointer the host cannot read: was a segfault
        return summary(asdlpack(_cuda_bitmap_column(fake, 0x1000)))

    add(g, "bitmap-unknown-count-unmapped", _on_fake_cuda(unmapped),
        Raises(("CudaError",), ("cuMemcpyDtoH", "CUDA_ERROR_INVALID_VALUE")))

    def counted(bits):
        def run(fake):
            bitmap = fake.device_array(_ap().bitmap(bits), device=0)
            return [summary(asdlpack(_cuda_bitmap_column(fake, bitmap))), fake.touched()]
        return run

    add(g, "bitmap-unknown-count-valid", _on_fake_cuda(counted("111")),
        Gives([[[3], [1], "float32", True], []]))
    add(g, "bitmap-unknown-count-null", _on_fake_cuda(counted("110")),
        buffer_error("1 null(s) among its 3 values", "fill_null"))

    def stale(before, after):
        def run(fake):
            raw = _ap().bitmap(before)
            host = (ctypes.c_ubyte * len(raw)).from_buffer_copy(raw)
            KEEP.append(host)
            bitmap = fake.pinned(host)
            stream = fake.stream()
            fake.kernel(stream, bitmap, _ap().bitmap(after))
            obj = _cuda_bitmap_column(fake, bitmap, kind=3, event=fake.record(stream))
            return summary(asdlpack(obj))
        return run

    add(g, "pinned-bitmap-written-valid", _on_fake_cuda(stale("000", "111")),
        Gives([[3], [1], "float32", True]))
    add(g, "pinned-bitmap-written-null", _on_fake_cuda(stale("111", "011")),
        buffer_error("1 null(s)"))


def _register_callbacks_while_refusing() -> None:
    """Foreign callbacks that run Python code run, and the refusal stays (docs/spec.md §7)."""
    g = "callbacks"

    def arrow_refused(make):
        state: dict = {}

        def run():
            ap = _ap()
            obj = ap.ArrayProducer(make(ap), destructor=True)
            state["obj"] = obj
            return summary(asdlpack(obj))

        def after():
            gc.collect()
            return state["obj"].released
        return run, after

    cases = [("nulls", lambda ap: _f32(ap, null_count=1, buffers=[ap.bitmap("1011"),
                                                                   ap.values("f", [1] * 4)]),
              ("1 null(s)",)),
             ("layout", lambda ap: _f32(ap, n_buffers=3), ("'n_buffers' = 3",)),
             ("type", lambda ap: ap.Col(b"vu", 1, buffers=[None, None]), ("string_view",))]
    for name, make, words in cases:
        run, after = arrow_refused(make)
        add(g, f"arrow-capsule-destructor-{name}", run,
            buffer_error("__arrow_c_array__", *words, after={"schema": 1, "array": 1}),
            after=after)

    calls: list = []

    def legacy_capsule():
        import warnings

        import dlpack

        memory = ctypes.create_string_buffer(64)
        KEEP.append(memory)

        class Producer:
            def __dlpack__(self, **kwargs):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    return dlpack.Capsule.new(ctypes.addressof(memory), "not_dltensor",
                                              lambda c: calls.append(c.get_name())).capsule

        return summary(asdlpack(Producer()))

    add(g, "legacy-capsule-destructor", legacy_capsule,
        buffer_error("'not_dltensor'", after=["not_dltensor"]), after=lambda: calls)


def _register_unreachable_blank() -> None:
    """No half-made DLPackObject is visible to Python code that runs while a reader reads."""
    g = "internal"

    def half_made():
        """A release callback (Python code run mid-read) searches the collector."""
        from dlpack import DLPackObject
        from dlpack.tools.check_arrow import SchemaRelease

        ap = _ap()
        seen: list = []

        def release(p) -> None:
            seen.extend(type(o).__name__ for o in gc.get_objects() if type(o) is DLPackObject
                        and o.itemsize == 0)
            p.contents.release = SchemaRelease()

        obj = ap.ArrayProducer(_f32(ap))
        obj.schema.release = SchemaRelease(release)
        KEEP.append(obj.schema.release)
        asdlpack(obj)
        return seen

    add(g, "blank-object-in-the-collector", half_made, Gives([]))


def _register_arrow_answers() -> None:
    """requested_schema per level, §3's order for the exchange API, Arrow's type names."""
    g = "arrow-answers"

    def bool8_levels():
        """fixed_size_list<bool8> asked of a (2, 3) bool tensor: bool8 stays on the values."""
        from dlpack.tools.check_arrow import struct_of

        ap = _ap()
        src = bytearray([1, 0, 1, 1, 0, 0])
        b = asdlpack(_bool_view(src, (2, 3)))
        wanted = ap.capsule(ap.build_schema(ap.Col(b"+w:3", children=[ap.Col(
            b"c", metadata=ap.extension(b"arrow.bool8"))])), b"arrow_schema")
        schema, _ = b.__arrow_c_array__(wanted)
        s = struct_of(schema, b"arrow_schema")
        child = s.children[0].contents
        return [s.format.decode(), bool(s.metadata), child.format.decode(),
                bool(child.metadata) and b"arrow.bool8" in ctypes.string_at(child.metadata, 64)]

    add(g, "requested-fsl-of-bool8", bool8_levels, Gives(["+w:3", False, "c", True]))

    def api_and_arrow():
        dlc = _dlc()
        import array

        src = array.array("f", [4, 5, 6])
        other = _ap().ArrayProducer(_f32(_ap()))
        api = dlc.DLPackExchangeAPI()
        api.header.version.major, api.header.version.minor = 1, 3
        entry = dict(dlc.DLPackExchangeAPI._fields_)["managed_tensor_from_py_object_no_sync"]

        def from_py(obj, out):
            out[0] = dlc.to_pointer(asdlpack(src))
            return 0

        api.managed_tensor_from_py_object_no_sync = entry(from_py)
        KEEP.append(api)
        cls = type("Both", (), {
            "__dlpack_c_exchange_api__": capsule(ctypes.addressof(api), b"dlpack_exchange_api"),
            "__arrow_c_array__": lambda self, requested_schema=None: other.__arrow_c_array__()})
        return memoryview(asdlpack(cls())).tolist()

    add(g, "exchange-api-before-arrow", api_and_arrow, Gives([4.0, 5.0, 6.0]))
    for fmt, name in [(b"vu", "string_view"), (b"vz", "binary_view"), (b"+vl", "list_view"),
                      (b"+vL", "large_list_view"), (b"U", "large_string")]:
        add(g, f"view-name-{name}", via_arrow(lambda ap, f=fmt: ap.Col(f, 1, buffers=[None])),
            buffer_error(f"is {name}, a "))


def _bool_view(buf, shape):
    """A bool DLPack view of buf's bytes with the given shape (through from_address)."""
    return _from_address(address(buf), shape, "bool", owner=buf)


for _register in (_register_device_bitmaps, _register_callbacks_while_refusing,
                  _register_unreachable_blank, _register_arrow_answers):
    _register()

def _register_fourth_round_gil() -> None:
    """A C thread Python never saw calls a callback while a Python thread holds the GIL in a
    long C call (before 3.12 the current thread state is the holder's, one per process): the
    callback waits for the GIL and drops its references in its own thread state."""
    g = "fourth-round-gil"

    def from_c_thread(kind):
        import threading

        dlc = _dlc()
        libc = ctypes.CDLL(None)
        libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong)] + [ctypes.c_void_p] * 3
        libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
        local, wrong, stop = threading.local(), [], threading.Event()

        class Witness(bytearray):
            def __del__(self):
                if getattr(local, "ident", threading.get_ident()) != threading.get_ident():
                    wrong.append(kind)

        def hold():
            local.ident = threading.get_ident()
            while not stop.is_set():
                sum(range(50_000))          # one C call: no switch inside it

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            for _ in range(20):
                dl = asdlpack(Witness(b"abcd"))
                if kind == "arrow":
                    _, array = dl.__arrow_c_array__()
                    get = ctypes.pythonapi.PyCapsule_GetPointer
                    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                  ctypes.c_char_p]
                    address = get(array, b"arrow_array")
                    function = ctypes.c_void_p.from_address(address + 64).value
                else:
                    p = dlc.to_pointer(dl, versioned=kind == "versioned")
                    address = ctypes.cast(p, ctypes.c_void_p).value
                    function = ctypes.cast(p.contents.deleter, ctypes.c_void_p).value
                del dl          # the callback holds the last reference
                tid = ctypes.c_ulong()
                libc.pthread_create(ctypes.byref(tid), None, function, address)
                libc.pthread_join(tid, None)
        finally:
            stop.set()
            holder.join()
        return wrong

    for kind in ("versioned", "legacy", "arrow"):
        add(g, f"c-thread-while-gil-held-{kind}", lambda k=kind: from_c_thread(k), Gives([]))


_register_fourth_round_gil()


def _register_fourth_round_checker() -> None:
    """The consumer checker is not fooled (spec §12): a forged result line fails the running
    rule, a hostile BufferError subclass is a refusal, a consumer importing nothing fails."""
    g = "checker"

    def graded(name):
        def run():
            from dlpack.tests import broken_consumers
            from dlpack.tools.check_consumer import SUITE, Consumer

            s = Consumer(getattr(broken_consumers, name))
            results = [SUITE.grade(s, rule) for rule in SUITE.rules]
            return [[r.rule for r in results if r.status == "fail"],
                    sorted({r.status for r in results[1:]}),
                    any("no name" in r.evidence or len(r.evidence) > 540 for r in results)]
        return run

    def forged():
        from dlpack.tools._grading import check_isolated
        from dlpack.tools.check_consumer import SUITE

        results = list(check_isolated("dlpack.tests.broken_consumers:forges_a_pass", SUITE))
        return [[r.rule for r in results] == SUITE.rules,
                [r.rule for r in results if r.status == "fail"],
                "result channel" in results[SUITE.rules.index("read-only")].evidence]

    add(g, "hostile-refusal-is-a-refusal", graded("hostile_refusals"),
        Gives([["byte-offset"], ["fail", "n/a", "pass"], False]))
    add(g, "consumer-returning-the-producer", graded("returns_the_producer"),
        Gives([["basic-import"], ["n/a"], False]))
    add(g, "forged-result-line", forged, Gives([True, ["read-only"], True]))


_register_fourth_round_checker()


def _register_fourth_round_owners() -> None:
    """from_address over an owner that exposes the memory holds that export (spec §2): the
    owner cannot move the memory (bytearray) or unmap it (mmap) under the live view."""
    g = "address"

    def resized():
        ba = bytearray(b"abcd" * 25)
        dl = _from_address(address(ba), (100,), "uint8", owner=ba)
        try:
            ba.extend(b"x" * 2**20)
        finally:
            KEEP.append(bytes(memoryview(dl)[:4]))
        return "resized"

    def closed():
        mm = mmap.mmap(-1, 4096)
        mm[:4] = b"wxyz"
        dl = _from_address(address(mm), (4,), "uint8", owner=mm)
        try:
            mm.close()
        finally:
            KEEP.append(bytes(memoryview(dl)))      # a read after an unmap faults
        return "closed"

    def read_only_mapping():
        import tempfile

        with tempfile.TemporaryFile() as f:
            f.write(b"\0" * 4096)
            f.flush()
            mm = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ)
        dl = _from_address(asdlpack(mm).data_ptr, (4096,), "uint8", owner=mm)
        return dl.readonly, memoryview(dl).readonly     # a write through it would fault

    def before_the_owner():
        ba = bytearray(16)
        return _from_address(address(ba), (16,), "uint8", owner=memoryview(ba)[8:16])

    add(g, "owner-bytearray-resized", resized, buffer_error(("resize", "re-size")))
    add(g, "owner-mmap-closed", closed, buffer_error("exported"))
    add(g, "owner-mapping-read-only", read_only_mapping, Gives([True, True]))
    add(g, "span-reaching-into-the-owner-from-before", before_the_owner,
        buffer_error("bytes before the start"))


_register_fourth_round_owners()


def _register_fourth_round_pickles() -> None:
    """Forged pickles of every kind with another field count are refused as forged pickles
    (BufferError naming the counts and fields), not as a call's TypeError; cuda_pickle reads a
    str subclass by its characters, whatever its __eq__ says (spec §11)."""
    g = "strides"

    def rebuild(name, count):
        from dlpack import _core

        return getattr(_core, name)(*[0] * count)

    for name, n, first in [("_rebuild", 8, "data"), ("_rebuild_copy", 3, "kind"),
                           ("_rebuild_ipc", 12, "handle")]:
        for count in (n - 1, n + 1):
            add(g, f"{name}-{count}-fields", lambda a=name, c=count: rebuild(a, c),
                buffer_error("pickle", f"{count} fields", f"has {n} ({first}, "))

    class Lying(str):
        def __eq__(self, other):
            return False

        __hash__ = str.__hash__

    def lying_mode():
        dl = asdlpack(b"ab", cuda_pickle=Lying("copy"))
        return asdlpack(dl, cuda_pickle="copy") is dl

    add(g, "cuda-pickle-lying-str-subclass", lying_mode, Gives(True))


_register_fourth_round_pickles()


def _register_fourth_round_streams() -> None:
    """A stream whose __index__ raises (spec §4): the consumer's __dlpack__ argument is a
    TypeError naming it, a provider's CAI field a BufferError naming the protocol; the
    original error is chained either way."""
    g = "streams"

    class RaisingIndex:
        def __index__(self):
            raise ValueError("no index today")

    def cai(fake, stream):
        ptr = fake.device_array(bytes(8), device=0)
        return Iface({"shape": (2,), "typestr": N + "f4", "data": (ptr, False), "version": 3,
                      "stream": stream}, CAI)

    def argument(fake):
        dl = asdlpack(cai(fake, None))
        try:
            dl.__dlpack__(stream=RaisingIndex(), max_version=(1, 0))
        except TypeError as e:
            raise TypeError(f"{e} (cause {type(e.__cause__).__name__})") from None

    def field(fake):
        try:
            asdlpack(cai(fake, RaisingIndex()))
        except BufferError as e:
            raise BufferError(f"{e} (cause {type(e.__cause__).__name__})") from None

    add(g, "dlpack-stream-index-raises", _on_fake_cuda(argument),
        type_error("__dlpack__: stream", "__index__ raised ValueError", "cause ValueError"))
    add(g, "cai-stream-index-raises", _on_fake_cuda(field),
        buffer_error(CAI, "field 'stream'", "__index__ raised ValueError", "cause ValueError"))


_register_fourth_round_streams()


def _register_fourth_round_numpy_column() -> None:
    """A column that Arrow refuses and whose dtype is NumPy's is read through
    __array__(copy=False) (spec §3): a dtype that raises, an __array__ that gives no ndarray or
    raises, and one giving other elements than its dtype said, each refused or read as what
    it gave."""
    g = "numpy-column"

    def column(dtype, array):
        """An object speaking Arrow (which refuses) and __array__, with the given dtype."""
        def stream(self, requested_schema=None):
            raise ValueError("Arrow refuses")

        return type("Column", (), {"dtype": property(dtype), "__array__": array,
                                   "__arrow_c_stream__": stream})()

    def np():
        import numpy

        return numpy

    def dtype_raises():
        def dtype(self):
            raise RuntimeError("dtype raised")

        return asdlpack(column(dtype, lambda self, dtype=None, copy=None: None))

    add(g, "dtype-raises", dtype_raises,
        buffer_error("Arrow refuses", "__array__ (NumPy-backed column)", "dtype raised"),
        needs=("numpy",))

    def gives_a_list():
        return asdlpack(column(lambda self: np().dtype("float32"),
                               lambda self, dtype=None, copy=None: [1.0, 2.0]))

    add(g, "array-gives-a-list", gives_a_list, buffer_error("gave a list, not a numpy.ndarray"),
        needs=("numpy",))

    def copy_refused():
        def array(self, dtype=None, copy=None):
            raise ValueError("Unable to avoid copy while creating an array as requested.")

        return asdlpack(column(lambda self: np().dtype("float64"), array))

    add(g, "array-refuses-copy-false", copy_refused,
        buffer_error("Arrow refuses", "Unable to avoid copy"), needs=("numpy",))

    def other_elements():
        """dtype says float64, __array__ gives int8: the ndarray's own elements are read."""
        values = np().arange(3, dtype="int8")
        dl = asdlpack(column(lambda self: np().dtype("float64"),
                             lambda self, dtype=None, copy=None: values))
        return [dl.dtype.name, memoryview(dl).tolist(), dl.data_ptr == values.ctypes.data]

    add(g, "array-other-elements", other_elements, Gives(["int8", [0, 1, 2], True]),
        needs=("numpy",))


_register_fourth_round_numpy_column()


def _register_fourth_round_stacks() -> None:
    """Per-dimension state of 1024 dimensions (and Arrow lists 300 deep) on threads with a
    32 KiB stack (spec §7: stack use per call is bounded): on the heap, freed on every path."""
    g = "stacks"

    def small(make):
        """make() builds the input on this thread; the work it returns runs on a small stack."""
        def case():
            from dlpack.tests import small_stacks

            return small_stacks.in_small_stack(make())
        return case

    def fortran_view(n, spread=1):
        """A view of 1024 dimensions, n of extent 2 (element strides spread * 1, 2, 4, …), and
        the bytes of its values in C order."""
        from dlpack.tests import small_stacks

        shape = (1,) * (1024 - n) + (2,) * n
        steps = (1,) * (1024 - n) + tuple(spread << i for i in range(n))
        return small_stacks._view(shape, steps), small_stacks._expected(shape, steps)

    def c_bytes(dl):
        from dlpack.tests import small_stacks

        return small_stacks.c_bytes(dl)

    def copy_1024():
        view, want = fortran_view(10)
        return lambda: [view.ndim, c_bytes(asdlpack(view.__dlpack__(copy=True))) == want]

    add(g, "copy-of-1024-dims", small(copy_1024), Gives([1024, True]))

    def pickle_1024():
        import pickle

        view, want = fortran_view(6, spread=3)         # gaps: pickled as a C-contiguous copy
        return lambda: c_bytes(pickle.loads(pickle.dumps(view, protocol=5))) == want

    add(g, "pickle-copy-of-1024-dims", small(pickle_1024), Gives(True))

    def deep_lists(requested):
        def make():
            ap = _ap()
            col = ap.primitive("f", [7.0], b"f")
            for _ in range(300):
                col = ap.Col(b"+w:1", 1, buffers=[None], children=[col])
            if requested:
                wanted = ap.capsule(ap.build_schema(col), b"arrow_schema")
                one = asdlpack(array.array("f", [7.0]))
                return lambda: one.__arrow_c_array__(wanted)
            producer = ap.ArrayProducer(col)

            def work():
                dl = asdlpack(producer)
                return [dl.ndim, c_bytes(dl) == array.array("f", [7.0]).tobytes()]
            return work
        return make

    add(g, "arrow-lists-300-deep", small(deep_lists(False)), Gives([301, True]))
    add(g, "arrow-requested-lists-300-deep", small(deep_lists(True)),
        buffer_error("requested_schema", "does not cast"))

    def allocator_1024():
        dlc = _dlc()
        from dlpack import DLPackObject

        api = dlc.exchange_api(DLPackObject)
        shape = (ctypes.c_int64 * 1024)(*[1] * 1020, 2, 3, 1, 4)
        proto = dlc.DLTensor(None, dlc.DLDevice(1, 0), 1024, dlc.DLDataType(2, 32, 1), shape,
                             None, 0)
        out = ctypes.POINTER(dlc.DLManagedTensorVersioned)()
        KEEP.extend([api, shape, proto])

        def call():
            rc = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                              dlc.DLPackSetError())
            dl = asdlpack(out)
            return [rc, dl.shape[-4:], dl.strides[-4:]]
        return call

    add(g, "allocator-of-1024-dims", small(allocator_1024),
        Gives([0, [2, 3, 1, 4], [12, 4, 4, 1]]))

    def device_1024(fake):
        from dlpack.tests import small_stacks
        from dlpack.tests.helpers import CAI

        ptr = fake.device_array(array.array("d", range(1024)).tobytes(), device=1)
        shape = (1,) * 1014 + (2,) * 10
        steps = (1,) * 1014 + tuple(1 << i for i in range(10))
        view = asdlpack(CAI(ptr, shape=shape, strides=tuple(8 * s for s in steps),
                            typestr="<f8"))
        want = small_stacks._expected(shape, steps)
        return small_stacks.in_small_stack(
            lambda: c_bytes(asdlpack(view.__dlpack__(dl_device=(1, 0), copy=True))) == want)

    add(g, "device-host-copy-of-1024-dims", _on_fake_cuda(device_1024), Gives(True))


_register_fourth_round_stacks()


def _register_shared_memory() -> None:
    """dlpack.share's handles forged or loaded at hostile moments (spec §11), with the standard
    library only: refused naming the field before anything is opened, and no deadlock when a
    finalizer pickles while a pickle lets go of a segment."""
    g = "shared-memory"

    def handle(x, **change):
        _, args = x.__reduce_ex__(5)            # what its pickle carries
        fields = dict(zip(("pid", "fd", "device", "inode", "token", "serial", "offset", "code",
                           "bits", "lanes", "shape", "strides", "flags"), args, strict=True))
        fields.update(change)
        return tuple(fields.values())

    def forged(**change):
        def run():
            from dlpack import share
            from dlpack._core import _rebuild_shared

            x = share(bytearray(32))
            return summary(_rebuild_shared(*handle(x, **change)))
        return run

    add(g, "offset-of-another-type-unopenable-fd",
        forged(offset="8", fd=1 << 30, inode=1 << 40), buffer_error("'offset'"))
    add(g, "offset-past-the-data", forged(offset=33), buffer_error("'offset'"))

    def pipe_fd():
        import os

        from dlpack import share
        from dlpack._core import _rebuild_shared

        x = share(bytearray(32))
        r, w = os.pipe()
        try:
            return summary(_rebuild_shared(*handle(x, fd=r, inode=1 << 40)))   # not mapped here
        finally:
            os.close(r)
            os.close(w)

    add(g, "fd-reused-by-a-pipe", pipe_fd, buffer_error("'device' and 'inode'", "another file"))

    def finalizer_pickles():
        import pickle

        from dlpack import share

        x, y = share(bytearray(b"abcd")), share(bytearray(b"efgh"))
        pickle.loads(pickle.dumps(y))
        weakref.finalize(y.base, lambda: pickle.dumps(x))
        del y
        gc.collect()
        pickle.dumps(x)             # lets go of y's segment, whose finalizer pickles x
        return list(bytes(pickle.loads(pickle.dumps(x))))

    add(g, "finalizer-pickles-while-a-pickle-lets-go", finalizer_pickles, Gives(list(b"abcd")))

    def view_of_read_only():
        from dlpack import share

        x = share(bytearray(b"abcd"), readonly=True)
        y = share(memoryview(x))                # another library's view of a read-only segment
        return [y.data_ptr != x.data_ptr, y.readonly, list(bytes(y))]

    add(g, "view-of-a-read-only-segment-is-copied", view_of_read_only,
        Gives([True, True, list(b"abcd")]))


if sys.platform.startswith("linux"):
    _register_shared_memory()

GROUPS = sorted({c.group for c in CASES.values()})


def available(case: Case) -> bool:
    """True when every module the case needs can be imported here."""
    return all(importlib.util.find_spec(m) is not None for m in case.needs)


def _outcome(case: Case) -> dict:
    out: dict = {"case": case.name}
    try:
        value = case.run()
        out["value"] = json.loads(json.dumps(value, default=repr))
    except BaseException as e:   # the corpus reports every exception, the parent judges it
        out["exc"] = [c.__name__ for c in type(e).__mro__]    # its class, then its bases
        out["msg"] = str(e)
        del e
    if case.after is not None:
        out["after"] = case.after()
    return out


def main(argv: list[str]) -> None:
    """Run the cases of group argv[0], from the one named argv[1] on (after a crash)."""
    names = [n for n, c in CASES.items() if c.group == argv[0] and available(c)]
    if len(argv) > 1:
        names = names[names.index(argv[1]):]
    for name in names:
        print("START", name, flush=True)
        print("RESULT", json.dumps(_outcome(CASES[name])), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
