"""Forged pickles of DLPackObject (docs/spec.md §11, §7): any stream, loaded with up to two
out-of-band buffers, by an unpickler that resolves only the globals a DLPackObject's pickle
names (dlpack._core._rebuild, bytearray, bytes, _codecs.encode). The pure-Python unpickler
is used so that the fuzzer sees which opcodes ran.

Checks: _rebuild raises only TypeError/BufferError, whatever the stream hands it; a view it
returns lies inside the buffer it was given (read in full).
"""

from __future__ import annotations

import _codecs
import io
import pickle
import struct
import traceback
from typing import ClassVar

from _common import ALLOWED, Finding, Reader, check_inside, fuzzbuf, main, touch

import dlpack
from dlpack._core import _rebuild


def rebuild(data, *fields):
    """_rebuild, checked."""
    try:
        dl = _rebuild(data, *fields)
    except ALLOWED:
        raise
    except Exception:
        raise Finding(f"_rebuild({data!r:.60}, {fields!r:.200}) raised:\n"
                      f"{traceback.format_exc()}") from None
    lo, n = fuzzbuf().address_of(data)
    check_inside(dl, lo, lo + n, "the buffer in the stream")
    touch(dl)
    return dl


def no_size(kind):
    """kind(...), but not kind(n): n zero bytes would let a stream of a few bytes ask for
    gigabytes (the harness's limit, not pydlpack's)."""
    def make(*args):
        if args and not isinstance(args[0], (bytes, bytearray, str)):
            raise pickle.UnpicklingError(f"{kind.__name__}({type(args[0]).__name__}) refused")
        return kind(*args)

    return make


GLOBALS = {("dlpack._core", "_rebuild"): rebuild, ("_codecs", "encode"): _codecs.encode}
for module in ("builtins", "__builtin__"):
    GLOBALS[module, "bytes"] = no_size(bytes)
    GLOBALS[module, "bytearray"] = no_size(bytearray)


class Unpickler(pickle._Unpickler):
    dispatch: ClassVar[dict] = dict(pickle._Unpickler.dispatch)

    def load_bytearray8(self):
        """BYTEARRAY8, without allocating the length it states before reading (the pure-
        Python unpickler's own quirk: 2**40 from a 20-byte stream)."""
        (n,) = struct.unpack("<Q", self.read(8))
        data = self.read(min(n, 1 << 16))
        if len(data) != n:
            raise pickle.UnpicklingError("BYTEARRAY8: the stream is shorter than its length")
        self.append(bytearray(data))

    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8

    def find_class(self, module, name):
        try:
            return GLOBALS[module, name]
        except (KeyError, TypeError):
            raise pickle.UnpicklingError(f"global {module}.{name} refused") from None


def describe(r: Reader) -> list[bytearray]:
    return [bytearray(r.blob(64)) for _ in range(r.int_in(0, 2))]


def test_one_input(data: bytes) -> None:
    r = Reader(data)
    buffers = describe(r)
    stream = data[r.pos:]
    try:
        Unpickler(io.BytesIO(stream), buffers=buffers).load()
    except Finding:
        raise
    except Exception:       # a malformed stream: the unpickler's own errors, any kind
        pass


def seeds() -> dict[str, bytes]:
    """Pickles of real DLPackObjects, in-band at every protocol and out-of-band at 5."""
    import array

    def head(*buffers: bytes) -> bytes:
        return bytes([len(buffers)]) + b"".join(bytes([len(b)]) + b for b in buffers)

    f = dlpack.asdlpack(array.array("f", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
    out = {}
    for protocol in range(6):
        out[f"float32-p{protocol}"] = head() + pickle.dumps(f, protocol=protocol)
    raw = bytearray(range(32))
    strided = dlpack.from_address(dlpack.asdlpack(raw).data_ptr, (2, 4), "int16", owner=raw,
                                  strides=(8, 1))
    out["strided-p4"] = head() + pickle.dumps(strided, protocol=4)
    out["readonly-p2"] = head() + pickle.dumps(dlpack.asdlpack(b"abcdef"), protocol=2)
    out["empty-p4"] = head() + pickle.dumps(dlpack.asdlpack(b""), protocol=4)
    for name, obj in (("float32", f), ("int4", dlpack.from_address(
            dlpack.asdlpack(raw).data_ptr, (7,), "int4", owner=raw))):
        bufs: list = []
        stream = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        out[f"{name}-oob"] = head(*[bytes(b.raw()) for b in bufs]) + stream
    return out


if __name__ == "__main__":
    main(test_one_input, pickle)
