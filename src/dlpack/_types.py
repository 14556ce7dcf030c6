"""DLPack enums and the dtype tables every protocol shares (pure Python; lookups are cached)."""

from __future__ import annotations

import enum
import operator
import sys
from functools import lru_cache

from dlpack._deprecated import Labelled, NestedFields

#: The DLPack version pydlpack speaks (dlpack.h's DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION).
DLPACK_VERSION = (1, 3)
#: The versioned tensor's flag: the memory must not be written.
FLAG_BITMASK_READ_ONLY = 1 << 0
#: The versioned tensor's flag: a copy the producer made, owned by the consumer alone.
FLAG_BITMASK_IS_COPIED = 1 << 1
#: The versioned tensor's flag: sub-byte elements are padded, not packed (the default).
FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED = 1 << 2


class DLPackError(BufferError):
    """pydlpack's own refusal, a BufferError: the data, or a protocol's description of it, is
    something DLPack cannot carry; the message starts with the protocol it names (spec §7).

    asdlpack wraps a producer's error in one of these naming the protocol that raised it, and
    passes one pydlpack raised on as it is: the type says which is which, not the wording.
    """


DLPackError.__module__ = "dlpack"      # where users import it from, and pickles find it


NATIVE = "<" if sys.byteorder == "little" else ">"


def _long_double_is_binary128() -> bool:
    """Whether C's long double (NumPy's 'f16') is IEEE binary128, read from the bytes of 1.0.

    On x86 it is the 80-bit x87 format padded to 16 bytes, on POWER often a double-double:
    there 'f16' is not DLPack's float128, and no typestr describes float128 exactly.
    """
    import ctypes

    one = ctypes.c_longdouble(1.0)
    return ctypes.sizeof(one) == 16 and bytes(one) == (0x3FFF << 112).to_bytes(16, sys.byteorder)


# float128 has an exact typestr ('f16', and complex256 'c32') only where long double is binary128.
BINARY128 = _long_double_is_binary128()


class DLDeviceType(Labelled, enum.IntEnum):
    """Where the data lives (``DLDeviceType`` of dlpack.h, v1.3)."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18


class DLDataTypeCode(Labelled, enum.IntEnum):
    """Type code of a ``DLDataType`` (dlpack.h, v1.3)."""

    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17


C = DLDataTypeCode
# Names of the types that carry their width in the code itself (the ML low-precision family),
# as ml_dtypes, PyTorch and JAX spell them.
_FIXED_WIDTH: dict[tuple[int, int], str] = {
    (C.kDLBfloat, 16): "bfloat16",
    (C.kDLFloat8_e3m4, 8): "float8_e3m4",
    (C.kDLFloat8_e4m3, 8): "float8_e4m3",
    (C.kDLFloat8_e4m3b11fnuz, 8): "float8_e4m3b11fnuz",
    (C.kDLFloat8_e4m3fn, 8): "float8_e4m3fn",
    (C.kDLFloat8_e4m3fnuz, 8): "float8_e4m3fnuz",
    (C.kDLFloat8_e5m2, 8): "float8_e5m2",
    (C.kDLFloat8_e5m2fnuz, 8): "float8_e5m2fnuz",
    (C.kDLFloat8_e8m0fnu, 8): "float8_e8m0fnu",
    (C.kDLFloat6_e2m3fn, 6): "float6_e2m3fn",
    (C.kDLFloat6_e3m2fn, 6): "float6_e3m2fn",
    (C.kDLFloat4_e2m1fn, 4): "float4_e2m1fn",
}
_PREFIX: dict[int, str] = {
    C.kDLInt: "int", C.kDLUInt: "uint", C.kDLFloat: "float", C.kDLComplex: "complex"}

# NumPy dtype names (ml_dtypes) whose typestr is an opaque 'V': name -> (code, bits).
ML_DTYPES = {name: key for key, name in _FIXED_WIDTH.items()}
ML_DTYPES.update({"int2": (C.kDLInt, 2), "uint2": (C.kDLUInt, 2),
                  "int4": (C.kDLInt, 4), "uint4": (C.kDLUInt, 4)})

# typestr kind -> DLPack code, for the kinds DLPack can carry.
_KIND_CODE = {"b": C.kDLBool, "i": C.kDLInt, "u": C.kDLUInt, "f": C.kDLFloat, "c": C.kDLComplex}
_KIND_WIDTHS = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8),
                "f": (2, 4, 8, 16) if BINARY128 else (2, 4, 8),
                "c": (4, 8, 16, 32) if BINARY128 else (4, 8, 16)}
# The widths NumPy reads exactly, by kind: what __array_interface__ may write (complex32 has no
# NumPy type and goes out as an opaque item, like bfloat16).
_EXACT_WIDTHS = dict(_KIND_WIDTHS, c=_KIND_WIDTHS["c"][1:])
# Item sizes beyond any type: a typestr of more digits is refused before int() reads them.
_MAX_DIGITS = 8
_CODE_KIND = {int(code): kind for kind, code in _KIND_CODE.items()}
_KIND_REJECT = {
    "M": "datetime", "m": "timedelta", "O": "object", "S": "byte string", "a": "byte string",
    "U": "unicode string", "V": "structured or opaque void",
}
# The way out of each refused kind, named in its message.
_KIND_WAY_OUT = {
    "M": "view it as int64 first (numpy: a.view('i8'))",
    "m": "view it as int64 first (numpy: a.view('i8'))",
    "O": "convert it to a numeric array first",
    "S": "view it as bytes first (numpy: a.view('u1'))",
    "a": "view it as bytes first (numpy: a.view('u1'))",
    "U": "view it as UCS-4 code points first (numpy: a.view('u4'))",
    "V": "pass one numeric field (a['name']) or a numeric view",
}


class DType:
    """A DLPack data type: ``code``, ``bits``, ``lanes`` and the conventional ``name``.

    Compares equal to another ``DType`` with the same fields, and to its name as a string.
    """

    __slots__ = ("bits", "code", "lanes", "name")
    code: DLDataTypeCode
    bits: int
    lanes: int
    name: str

    def __init__(self, code: int, bits: int, lanes: int = 1) -> None:
        try:
            code = DLDataTypeCode(code)
        except ValueError:
            pass
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "lanes", lanes)
        object.__setattr__(self, "name", _name(code, bits, lanes))

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError("DType is immutable")

    @property
    def itemsize(self) -> int:
        """Bytes per element, rounded up for sub-byte types."""
        return (self.bits * self.lanes + 7) // 8

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return (self.code, self.bits, self.lanes) == (other.code, other.bits, other.lanes)
        if isinstance(other, str):
            return self.name == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((int(self.code), self.bits, self.lanes))

    def __repr__(self) -> str:
        return f"DType({self.name!r}, code={int(self.code)}, bits={self.bits}, lanes={self.lanes})"

    def __str__(self) -> str:
        return self.name


def _name(code: int, bits: int, lanes: int) -> str:
    if code == C.kDLBool and bits == 8:
        base = "bool"
    elif (code, bits) in _FIXED_WIDTH:
        base = _FIXED_WIDTH[code, bits]
    elif code in _PREFIX:
        base = f"{_PREFIX[code]}{bits}"
    elif code == C.kDLOpaqueHandle:
        base = f"opaque{bits}"
    else:
        base = f"code{code}_{bits}"
    return base if lanes == 1 else f"{base}x{lanes}"


class Fields(NestedFields):
    """``todict``'s result: every DLPack field by name. pydlpack 0.2.1's nested
    ``["dl_tensor"]`` layout still reads, with a DeprecationWarning (docs/migration.md)."""

    __slots__ = ()


# Names of the types DLPack carries, as DType.name spells them -> (code, bits).
_BY_NAME: dict[str, tuple[int, int]] = {
    "bool": (C.kDLBool, 8),
    **{f"int{b}": (C.kDLInt, b) for b in (8, 16, 32, 64)},
    **{f"uint{b}": (C.kDLUInt, b) for b in (8, 16, 32, 64)},
    **{f"float{b}": (C.kDLFloat, b) for b in (16, 32, 64)},
    **{f"complex{b}": (C.kDLComplex, b) for b in (32, 64, 128)},
    **ML_DTYPES,
}


def dtype_fields(protocol: str, value: object) -> tuple[int, int, int, int]:
    """(code, bits, lanes, flags) of a dtype a caller names: a name such as ``"float32"`` or
    ``"float32x4"`` (4 lanes), a ``DType``, or a NumPy dtype or type (ml_dtypes' included).

    Sub-byte names (``"int4"``) are packed; a NumPy sub-byte dtype is one element a byte, so it
    comes with IS_SUBBYTE_TYPE_PADDED. Raises TypeError for other kinds of value, BufferError
    for names DLPack has no type for.
    """
    if isinstance(value, DType):
        try:            # exact ints: a subclass's fields (or their comparisons) cannot lie
            code, bits, lanes = (operator.index(f) for f in (value.code, value.bits, value.lanes))
        except TypeError:
            raise TypeError(f"{protocol}: dtype = {value!r:.80} has a field that is not an "
                            "int") from None
        if code not in _CODES or not 0 <= bits < 256 or not 0 <= lanes < 65536:
            raise DLPackError(f"{protocol}: dtype = {value!r} is not a DLPack type (code "
                              "0 to 17, bits below 256, lanes below 65536)")
        return code, bits, lanes, 0
    if isinstance(value, str):
        # Looked up as an exact str: a subclass's __hash__ and __eq__ would poison the cache
        # (and the cache would keep its class alive); str.__str__ gives its characters.
        return (*_named(protocol, value if type(value) is str else str.__str__(value)), 0)
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            dt = np.dtype(value)
        except TypeError:
            dt = None
        except Exception as e:      # (np.int32, -1), or a .dtype attribute that raised
            raise TypeError(f"{protocol}: dtype = {value!r:.80} is not a dtype NumPy can "
                            f"make ({type(e).__name__}: {e}); pass a type name such as "
                            "'float32', a dlpack.DType or a NumPy dtype") from None
        if dt is not None:
            if dt.byteorder not in "=|" and dt.byteorder != NATIVE:
                raise DLPackError(f"{protocol}: dtype = {dt!r} is non-native byte order; "
                                  "byte-swap the data first")
            code, bits, lanes = _named(protocol, dt.name)
            padded = bits < 8 and dt.itemsize == 1
            return code, bits, lanes, FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED if padded else 0
    raise TypeError(f"{protocol}: dtype = {value!r:.80} is not a type name such as 'float32', a "
                    "dlpack.DType or a NumPy dtype")


_CODES = frozenset(int(c) for c in DLDataTypeCode)


@lru_cache(maxsize=256)
def _named(protocol: str, name: str) -> tuple[int, int, int]:
    base, lanes = name, 1
    head, x, tail = name.rpartition("x")          # "float32x4": 4 lanes of float32
    if x and head in _BY_NAME and tail.isascii() and tail.isdigit():
        base, lanes = head, int(tail)
    if base in _BY_NAME and 0 < lanes < 65536:
        code, bits = _BY_NAME[base]
        return int(code), bits, lanes
    raise DLPackError(f"{protocol}: dtype = {name!r:.80} is not a type DLPack carries; use a "
                      "name such as 'float32', 'int64', 'bool', 'complex64', 'bfloat16' or "
                      "'float8_e4m3fn' (a dlpack.DType for anything else)")


@lru_cache(maxsize=4096)
def dtype(code: int, bits: int, lanes: int = 1) -> DType:
    """The shared ``DType`` instance for (code, bits, lanes)."""
    return DType(code, bits, lanes)


def parse_typestr(protocol: str, typestr: object, name: str | None) -> tuple[int, int, int]:
    """(code, bits, flags) of an array-interface typestr; ``name`` is the provider's dtype name.

    Raises BufferError naming the protocol, the field and the value when DLPack cannot carry it.
    """
    if type(typestr) is not str or (name is not None and type(name) is not str):
        raise DLPackError(f"{protocol}: field 'typestr' = {typestr!r} is not a str such as '<f4'")
    return _parse_typestr(protocol, typestr, name)


def _shown(typestr: str) -> str:
    """A typestr as messages quote it: whole unless it is absurdly long."""
    return repr(typestr) if len(typestr) <= 40 else f"{typestr[:24]!r}... ({len(typestr)} chars)"


@lru_cache(maxsize=256)
def _parse_typestr(protocol: str, typestr: str, name: str | None) -> tuple[int, int, int]:
    if len(typestr) >= 2 and typestr[1] in _KIND_REJECT and not (typestr[1] == "V"
                                                                 and name in ML_DTYPES):
        raise DLPackError(f"{protocol}: field 'typestr' = {_shown(typestr)} is a "
                          f"{_KIND_REJECT[typestr[1]]} type, which DLPack cannot carry; "
                          f"{_KIND_WAY_OUT[typestr[1]]}")
    if len(typestr) < 3 or not (typestr[2:].isascii() and typestr[2:].isdigit()):
        raise DLPackError(f"{protocol}: field 'typestr' = {_shown(typestr)} is not of the form "
                          "'<byte order><kind><item size>', e.g. '<f4'")
    if len(typestr[2:].lstrip("0")) > _MAX_DIGITS:
        raise DLPackError(f"{protocol}: field 'typestr' = {_shown(typestr)} has an item size "
                          "larger than any type")
    order, kind, size = typestr[0], typestr[1], int(typestr[2:].lstrip("0") or "0")
    if order not in "<>|=":
        raise DLPackError(f"{protocol}: field 'typestr' = {typestr!r} has an unknown byte-order "
                          f"character {order!r}")
    if kind in "Vf" and name in ML_DTYPES:      # name: a real ml_dtypes dtype said it
        code, bits = ML_DTYPES[name]
        if size * 8 == bits:
            return code, bits, 0
        if bits < 8 and size == 1:
            return code, bits, FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    if kind not in _KIND_CODE:
        raise DLPackError(f"{protocol}: field 'typestr' = {typestr!r} has an unknown kind {kind!r}")
    if size not in _KIND_WIDTHS[kind]:
        long_double = size in ((10, 12, 16) if kind == "f" else (20, 24, 32) if kind == "c" else ())
        what = "long double" if long_double else f"{size}-byte"
        raise DLPackError(f"{protocol}: field 'typestr' = {typestr!r} is a {what} "
                          f"{'complex' if kind == 'c' else 'number'}, which DLPack cannot carry")
    if size > 1 and order == ("<" if NATIVE == ">" else ">"):
        raise DLPackError(f"{protocol}: field 'typestr' = {typestr!r} is non-native byte order; "
                          "byte-swap it first (e.g. numpy: a.astype(a.dtype.newbyteorder('=')))")
    return int(_KIND_CODE[kind]), size * 8, 0


#: The way out for elements narrower than a byte or of several lanes, which no array-interface
#: typestr or PEP 3118 format describes (the array interface's and the buffer's refusals).
PACKED_WAY_OUT = ("take the bytes as uint8 (C-contiguous data: from_address(dl.data_ptr, "
                  "(dl.nbytes,), 'uint8', owner=dl)), or give __dlpack__ to a consumer that "
                  "knows the type")


@lru_cache(maxsize=4096)
def array_typestr(code: int, bits: int, lanes: int) -> tuple[str, list[tuple[str, str]]]:
    """(typestr, descr) describing a DLPack dtype to an array-interface consumer.

    ML types with no NumPy kind become opaque ``V`` items named in ``descr``, so NumPy can view
    the memory; ``.view(ml_dtypes.<name>)`` then gives the typed view.
    """
    if lanes != 1 or bits % 8:
        raise DLPackError(f"__array_interface__: dtype {_name(code, bits, lanes)} has no "
                          f"array-interface typestr (vector or sub-byte type); {PACKED_WAY_OUT}")
    size = bits // 8
    kind = _CODE_KIND.get(code)
    order = "|" if size == 1 else NATIVE
    if kind is not None and size in _EXACT_WIDTHS[kind]:
        typestr = f"{order}{kind}{size}"
        return typestr, [("", typestr)]
    if kind is not None and (code, bits) != (C.kDLComplex, 32):
        why = (f"'{order}{kind}{size}' is this platform's long double, not IEEE binary128"
               if kind in "fc" and size in (16, 32) else
               f"'{order}{kind}{size}' is no NumPy type")
        raise DLPackError(f"__array_interface__: dtype {_name(code, bits, lanes)} has no exact "
                          f"typestr ({why}); use __dlpack__")
    typestr = f"|V{size}"
    return typestr, [(_name(code, bits, lanes), typestr)]
