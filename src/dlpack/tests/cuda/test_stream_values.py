"""CUDA stream values, both ways, in one place: the stream a __cuda_array_interface__ names and
the stream argument of __dlpack__ — None, -1, 1, 2 and handles; 0, bool, non-ints and
out-of-range values refused; taken with __index__ (NumPy ints, an int whose == lies)."""

import pytest

from dlpack import asdlpack
from dlpack.tests import fake_cuda
from dlpack.tests.helpers import CAI, NOWHERE, cuda_floats, lib


def test_stream_zero_refused_from_consumers_and_legacy_in_a_cai(fake):
    """The array API forbids __dlpack__(stream=0); numba-cuda's CAI names its default stream 0,
    which CuPy and Numba read as the legacy default stream, and so does pydlpack (spec §3.4)."""
    ptr = cuda_floats(fake)
    dl = asdlpack(CAI(ptr, stream=7))
    with pytest.raises(BufferError, match="stream = 0"):
        dl.__dlpack__(stream=0)
    zero = asdlpack(CAI(ptr, stream=0))
    assert zero.__cuda_array_interface__["stream"] == 1
    fake.stream(5, device=1)
    fake.calls.clear()
    zero.__dlpack__(stream=5, max_version=(1, 0))
    assert ("cuEventRecord", fake_cuda.EVENT, 1) in fake.calls      # after the legacy stream
    with pytest.raises(BufferError, match="stream"):
        dl.__dlpack__(stream="fast")
    for bad in (-2, 2**64):
        with pytest.raises(BufferError, match="not a CUDA stream handle"):
            dl.__dlpack__(stream=bad)
        with pytest.raises(BufferError, match="not a CUDA stream handle"):
            asdlpack(CAI(ptr, stream=bad))


@pytest.mark.parametrize("stream", [True, False, 1.0, "7", -1, -2, 2**64])
def test_cai_stream_field_bad_values(fake, stream):
    with pytest.raises(BufferError, match=r"__cuda_array_interface__: field 'stream'"):
        asdlpack(CAI(NOWHERE, stream=stream))
    assert fake.current == [] and fake.calls == []


@pytest.mark.parametrize("stream", [2**64 - 1, 2**63, 3])
def test_extreme_but_valid_stream_handles_round_trip(fake, stream):
    dl = asdlpack(CAI(cuda_floats(fake, device=0, stream=stream), stream=stream))
    assert dl.__cuda_array_interface__["stream"] == stream
    fake.stream(5)
    fake.calls.clear()
    dl.__dlpack__(stream=5, max_version=(1, 0))
    assert ("cuEventRecord", fake_cuda.EVENT, stream) in fake.calls
    assert fake.current == []


@pytest.mark.parametrize("stream", [True, False, 1.5, "x", 0, -5, 2**70])
def test_host_copy_validates_the_stream_argument(fake, stream):
    """FINDING: with dl_device=(kDLCPU, 0) on CUDA data the stream argument is never looked
    at: True, 1.5, 'x', 0 (disallowed for CUDA), -5 and 2**70 all give a host copy, while the
    same values are refused without dl_device and on a device copy. Expected: the same
    BufferError/TypeError naming __dlpack__ and the stream."""
    dl = asdlpack(CAI(cuda_floats(fake, device=0), stream=7))
    with pytest.raises((BufferError, TypeError), match="stream"):
        dl.__dlpack__(stream=stream, dl_device=(1, 0), max_version=(1, 0))
    with pytest.raises((BufferError, TypeError), match="stream"):      # already refused here
        asdlpack(b"abcd").__dlpack__(stream=stream, dl_device=(2, 0), max_version=(1, 0))
    assert fake.current == [] and not fake.allocated()


# -- stream ordering ---------------------------------------------------------------------------


class LyingInt(int):
    def __eq__(self, other):
        return False

    __hash__ = int.__hash__


def test_finding_an_int_whose_eq_lies_cannot_pass_stream_0(fake):
    """Before: LyingInt(0) == 0 is False, so stream 0 (ambiguous) got an event wait queued."""
    ptr = cuda_floats(fake, device=0, stream=None)
    side = fake.stream()
    dl = asdlpack(CAI(ptr, stream=side, shape=(6,)))
    with pytest.raises(BufferError, match="stream = 0 is disallowed"):
        dl.__dlpack__(stream=LyingInt(0), max_version=(1, 0))
    assert asdlpack(CAI(ptr, stream=LyingInt(0), shape=(6,))).__cuda_array_interface__[
        "stream"] == 1                  # 0 in a CAI is the legacy default stream, by __index__
    with pytest.raises(BufferError, match="stream = 0 is disallowed"):
        dl.__dlpack__(stream=LyingInt(0), dl_device=(1, 0), max_version=(1, 0))
    assert not [c for c in fake.calls if c[0] == "cuStreamWaitEvent"]


def test_finding_cai_stream_takes_numpy_ints(fake):
    """Other CAI fields take NumPy ints; the stream was refused (before: BufferError)."""
    np = lib("numpy")
    side = fake.stream()
    dl = asdlpack(CAI(fake.device_array(bytes(24)), stream=np.int64(side), shape=(6,)))
    assert dl.__cuda_array_interface__["stream"] == side
    assert type(dl.__cuda_array_interface__["stream"]) is int


class RaisingIndex:
    """A stream whose __index__ raises other than TypeError."""

    def __index__(self):
        raise ValueError("no index today")


def test_a_stream_whose_index_raises_is_a_type_error_naming_the_argument(fake):
    """spec §4: the consumer's stream argument whose __index__ raises is a TypeError naming
    the argument and that error, chained, on every path that reads it (a host copy too); a
    provider's CAI field so is a BufferError naming the protocol."""
    dl = asdlpack(CAI(cuda_floats(fake, device=0), stream=7))
    for kwargs in ({}, {"dl_device": (1, 0)}, {"dl_device": (2, 0)}):
        with pytest.raises(TypeError, match=r"__dlpack__: stream: a RaisingIndex object whose "
                                            r"__index__ raised ValueError: no index today") as e:
            dl.__dlpack__(stream=RaisingIndex(), max_version=(1, 0), **kwargs)
        assert type(e.value.__cause__) is ValueError
    with pytest.raises(BufferError, match=r"__cuda_array_interface__: field 'stream': a "
                                          r"RaisingIndex object whose __index__ raised") as e:
        asdlpack(CAI(NOWHERE, stream=RaisingIndex()))
    assert type(e.value.__cause__) is ValueError
