"""__dlpack__ as a plan (spec §4, §10): the one decision of what an export is, checked for
every combination of source device, dl_device, copy, stream, consumer, read-only-ness and torch
against a table; each refusal's message; and the carrying-out (fake CUDA driver for the CUDA
kinds) against the plan."""

from __future__ import annotations

import ctypes
import itertools

import pytest

from dlpack import DLDeviceType as D
from dlpack import _core, asdlpack, from_address, todict
from dlpack.tests.helpers import CAI, cuda_floats

np = pytest.importorskip("numpy", reason="numpy is not installed")

# The source devices, one of each kind the plan tells apart ("other": a kind pydlpack neither
# reads on the host nor copies, OpenCL here).
SOURCES = {"cpu": (D.kDLCPU, 0), "cuda": (D.kDLCUDA, 1), "pinned": (D.kDLCUDAHost, 1),
           "managed": (D.kDLCUDAManaged, 1), "rocm": (D.kDLROCM, 1),
           "rocm_host": (D.kDLROCMHost, 1), "other": (D.kDLOpenCL, 1)}

# dl_device, relative to the source: "same" is the source's own device; "gpu" a CUDA GPU (for
# CUDA data another one); "other" a device of a kind no copy reaches.
TARGETS = {"none": None, "same": "same", "cpu": (D.kDLCPU, 0), "cpu3": (D.kDLCPU, 3),
           "gpu": (D.kDLCUDA, 0), "gpu-1": (D.kDLCUDA, -1), "rocm": (D.kDLROCM, 0),
           "other": (D.kDLOpenCL, 0)}
COPIES = {"None": None, "True": True, "False": False}
STREAMS = (None, -1, 5)

# The expected plan. A row: sources, dl_devices, copy values, whether the consumer is a legacy
# one reading read-only data it may not share (y/n), then either a refusal (!name), or the kind
# with its copy reason, the order with no stream and with one, and whether torch's
# current-device rule is checked (y: when the data came through torch's exchange API). '*' is
# any; '|' separates alternatives. Every combination matches exactly one row.
TABLE = """
*              cpu3                     *          * !host_id
cpu|rocm_host  none|same                None|False n view                         none    !stream -
cpu|rocm_host  none|same                None       y host_copy:legacy_read_only   none    !stream -
cpu|rocm_host  none|same                True       * host_copy:asked              none    !stream -
cpu|rocm_host  none|same                False      y !legacy_read_only
cpu            cpu                      None|False n view                         none    !stream -
cpu            cpu                      None       y host_copy:legacy_read_only   none    !stream -
cpu            cpu                      True       * host_copy:asked              none    !stream -
cpu            cpu                      False      y !legacy_read_only
rocm_host      cpu                      None|True  * host_copy:move               none    !stream -
rocm_host      cpu                      False      * !needs_copy
cpu|rocm_host  gpu                      None|True  * to_device:move               by_copy by_copy -
cpu|rocm_host  gpu                      False      * !needs_copy
cpu|rocm_host  gpu-1                    *          * !no_cuda_device
cpu|rocm_host  rocm|other               *          * !cannot_move
cuda           none|same                None|False n view                         stream  stream  y
cuda           none|same                None       y device_copy:legacy_read_only by_copy by_copy y
cuda           none|same                True       * device_copy:asked            by_copy by_copy y
cuda           none|same                False      y !legacy_read_only
cuda           cpu                      None|True  * host_copy_of_device:move     host    host    y
cuda           cpu                      False      * !needs_copy
cuda           gpu|gpu-1|rocm|other     *          * !cannot_move
pinned|managed none|same                None|False n view                         host    stream  y
pinned|managed none|same                None       y host_copy:legacy_read_only   host    host    y
pinned|managed none|same                True       * host_copy:asked              host    host    y
pinned|managed none|same                False      y !legacy_read_only
pinned|managed cpu                      None|False n host_view                    host    host    -
pinned|managed cpu                      None       y host_copy:legacy_read_only   host    host    -
pinned|managed cpu                      True       * host_copy:asked              host    host    -
pinned|managed cpu                      False      y !legacy_read_only
pinned|managed gpu                      None|True  * to_device:move               by_copy by_copy -
pinned|managed gpu                      False      * !needs_copy
pinned|managed gpu-1                    *          * !no_cuda_device
pinned|managed rocm|other               *          * !cannot_move
rocm           none|same                None|False n view                         none    rocm    -
other          none|same                None|False n view                         none    !stream -
rocm|other     none|same                None       y !copy_in_place
rocm|other     none|same                True       * !copy_in_place
rocm|other     none|same                False      y !legacy_read_only
rocm|other     cpu|gpu|gpu-1|rocm|other *          * !cannot_move
"""


def _rows() -> list[tuple]:
    rows = []
    for line in TABLE.strip().splitlines():
        source, target, copy, lro, *out = line.split()
        rows.append((line, *(set(f.split("|")) for f in (source, target, copy, lro)), out))
    return rows


ROWS = _rows()


def _field_matches(allowed: set[str], value: str) -> bool:
    return "*" in allowed or value in allowed


def expected(source: str, target: str, copy: str, lro: str) -> tuple[str, list[str]]:
    """The one table row for a combination, and its outcome."""
    found = [(line, out) for line, s, t, c, r, out in ROWS
             if all(_field_matches(f, v) for f, v in ((s, source), (t, target), (c, copy),
                                                      (r, lro)))]
    assert len(found) == 1, f"{(source, target, copy, lro)} matches {len(found)} rows: {found}"
    return found[0]


def plan_of(source, target, copy, stream, versioned, read_only, torch):
    here = SOURCES[source]
    dl_device = here if TARGETS[target] == "same" else TARGETS[target]
    return _core._export_plan_of(here, dl_device, COPIES[copy], stream is not None, versioned,
                                 read_only, torch)


def test_every_combination_is_planned_as_the_table_says():
    used = set()
    for source, target, copy, stream, versioned, read_only, torch in itertools.product(
            SOURCES, TARGETS, COPIES, STREAMS, (True, False), (True, False), (True, False)):
        line, out = expected(source, target, copy, "y" if read_only and not versioned else "n")
        used.add(line)
        kind, order, reason, refusal, torch_device, plan_target = plan_of(
            source, target, copy, stream, versioned, read_only, torch)
        case = (source, target, copy, stream, versioned, read_only, torch)
        if out[0].startswith("!"):
            assert (kind, order, reason, refusal, torch_device) == (
                "refused", "none", "none", out[0][1:], False), case
            continue
        want_kind, _, want_reason = out[0].partition(":")
        want_order = out[1] if stream is None else out[2]
        if want_order == "!stream":
            assert (kind, refusal) == ("refused", "stream"), case
            continue
        assert (kind, reason or "none", order, refusal) == (
            want_kind, want_reason or "none", want_order, "none"), case
        assert torch_device == (torch and out[3] == "y"), case
        here = SOURCES[source]
        dl_device = here if TARGETS[target] in (None, "same") else TARGETS[target]
        keeps_kind = kind == "host_copy" and source in ("pinned", "managed") and target in (
            "none", "same")         # a copy of pinned or managed data stays pinned or managed
        assert plan_target == {"view": here, "device_copy": here, "to_device": dl_device}.get(
            kind, here if keeps_kind else (D.kDLCPU, 0)), case
    assert used == {line for line, *_ in ROWS}, "rows that no combination reaches"


def test_the_common_case_is_decided_as_the_full_rules_decide():
    """_export_plan decides CPU data exported as it is in a few instructions, and everything
    else with _plan_in_full: the two agree on every combination (spec §8: a fast path never
    changes semantics)."""
    fast = 0
    for source, target, copy, stream, versioned, read_only, torch in itertools.product(
            SOURCES, TARGETS, COPIES, STREAMS, (True, False), (True, False), (True, False)):
        here = SOURCES[source]
        dl_device = here if TARGETS[target] == "same" else TARGETS[target]
        args = (here, dl_device, COPIES[copy], stream is not None, versioned, read_only, torch)
        assert _core._export_plan_of(*args) == _core._export_plan_of(*args, full=True), args
        fast += source == "cpu" and target == "none" and stream is None and not (
            copy == "True" or (read_only and not versioned))
    assert fast == 2 * 2 * 2 * 2 - 2 * 2    # copy None/False x the bools, less legacy read-only


def test_stream_minus_one_plans_as_any_stream():
    """-1 (no synchronisation) is told apart when the plan is carried out, not in it."""
    for source, target in itertools.product(SOURCES, TARGETS):
        assert plan_of(source, target, "None", -1, True, False, True) == plan_of(
            source, target, "None", 5, True, False, True)


def test_copy_is_read_by_the_one_parser():
    """numpy.False_ and 0 plan as False, numpy.True_ and 1 as True; anything else is refused
    before a plan is made (spec §4)."""
    here = SOURCES["cpu"]
    for same, value in ((False, np.False_), (False, 0), (True, np.True_), (True, 1)):
        assert _core._export_plan_of(here, None, value, False, False, True, False) == \
            _core._export_plan_of(here, None, same, False, False, True, False)
    with pytest.raises(TypeError, match="copy = 2 is not None, a bool or 0/1"):
        _core._export_plan_of(here, None, 2, False, True, False, False)


def _rocm(readonly=False):
    buf = (ctypes.c_float * 6)(*range(6))
    return from_address(ctypes.addressof(buf), (2, 3), "float32", owner=buf, readonly=readonly,
                        device=(D.kDLROCM, 1))


@pytest.mark.parametrize(("make", "kwargs", "message"), [
    (lambda: asdlpack(np.zeros(3)), {"dl_device": (1, 3)},
     "__dlpack__: dl_device = (1, 3): the host is device (1, 0); no other kDLCPU id names a "
     "device"),
    (lambda: asdlpack(np.zeros(3)), {"dl_device": (2, -1)},
     "__dlpack__: dl_device = (2, -1): no such CUDA device"),
    (lambda: asdlpack(np.zeros(3)), {"dl_device": [10, 0]},
     "__dlpack__: dl_device = [10, 0]: cannot move data from kDLCPU:0 there (pydlpack copies "
     "between the host and a GPU, not between GPUs)"),
    (lambda: asdlpack(np.zeros(3)), {"dl_device": (2, 0), "copy": False},
     "__dlpack__: dl_device = (2, 0) needs a copy from kDLCPU:0, but copy=False"),
    (lambda: asdlpack(b"abc"), {"copy": False},
     "__dlpack__: the data is read-only and this consumer asked for a legacy (unversioned) "
     "capsule, which cannot say so, with copy=False. Use a consumer that passes max_version "
     ">= (1, 0), allow a copy, or opt in with asdlpack(obj, allow_legacy_readonly=True)"),
    (_rocm, {"copy": True, "max_version": (1, 0)},
     "__dlpack__: a copy of data on kDLROCM:1 in place is not supported; ask for a host copy "
     "with dl_device=(1, 0)"),
    (lambda: asdlpack(np.zeros(3)), {"stream": 5},
     "__dlpack__: stream = 5 must be None for data on kDLCPU:0"),
    (lambda: asdlpack(np.zeros(3)), {"dl_device": (1, 2**40)},
     "__dlpack__: dl_device = (1, 1099511627776) names no device (a value beyond 32 bits)"),
    (_rocm, {"stream": 5},
     "__dlpack__: stream = 5: pydlpack cannot order ROCm streams for this provider; pass "
     "stream=None or -1"),
])
def test_each_refusal_keeps_its_message(make, kwargs, message):
    with pytest.raises(BufferError) as e:
        make().__dlpack__(**kwargs)
    assert str(e.value) == message


# -- the carrying-out, against the plan -----------------------------------------------------

REFUSALS = {"host_id": "the host is device", "no_cuda_device": "no such CUDA device",
            "cannot_move": "cannot move data", "needs_copy": "needs a copy",
            "legacy_read_only": "the data is read-only", "copy_in_place": "in place is not",
            "stream": "must be None for data", "rocm": "cannot order ROCm streams"}


def _sources(fake, read_only):
    """One DLPackObject per source kind; CUDA memory is the fake driver's, on GPU 1, its
    producer's work on stream 7."""
    host = (ctypes.c_float * 6)(*range(6))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    a.flags.writeable = not read_only
    out = {"cpu": asdlpack(a),
           "cuda": asdlpack(CAI(cuda_floats(fake), stream=7, readonly=read_only)),
           "pinned": asdlpack(CAI(fake.pinned(host, device=1), stream=7, readonly=read_only)),
           "managed": asdlpack(CAI(fake.managed((ctypes.c_float * 6)(*range(6)), device=1),
                                   stream=7, readonly=read_only))}
    for name in ("rocm", "rocm_host", "other"):
        out[name] = from_address(ctypes.addressof(host), (2, 3), "float32", owner=host,
                                 readonly=read_only, device=SOURCES[name])
    return out


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("versioned", [False, True])
def test_the_export_is_what_its_plan_says(fake, versioned, read_only):
    for source, dl in _sources(fake, read_only).items():
        here = dl.__dlpack_device__()
        data = todict(dl)["data"]
        for target, copy, stream in itertools.product(TARGETS, COPIES, (None, -1, 1)):
            dl_device = here if TARGETS[target] == "same" else TARGETS[target]
            kind, order, reason, refusal, _, plan_target = _core._export_plan_of(
                here, dl_device, COPIES[copy], stream is not None, versioned,
                read_only, False)
            case = (source, target, copy, stream)
            kwargs = {"dl_device": dl_device, "copy": COPIES[copy], "stream": stream,
                      "max_version": (1, 0) if versioned else None}
            fake.calls.clear()
            if order == "rocm" and stream != -1:    # no provider here to order ROCm streams
                refusal = "rocm"
            if refusal != "none":
                with pytest.raises(BufferError, match=REFUSALS[refusal]):
                    dl.__dlpack__(**kwargs)
                assert fake.calls == [], case
                continue
            capsule = dl.__dlpack__(**kwargs)      # owns a copy: kept while it is read
            got = todict(capsule)
            assert got["device"] == plan_target, case
            assert (got["data"] == data) == (kind in ("view", "host_view")), case
            if versioned:
                assert bool(got["flags"] & 2) == (reason != "none"), case   # IS_COPIED
            host_waits = ("cuStreamSynchronize", 7) in fake.calls
            records = [c for c in fake.calls if c[0] == "cuEventRecord"]
            if order == "host":
                assert host_waits, case
            elif order == "stream":             # one event, unless the consumer said -1
                assert not host_waits and len(records) == (stream != -1), case
            elif order == "none":
                assert fake.calls == [], case
            if kind in ("host_copy", "host_copy_of_device"):
                assert ctypes.string_at(got["data"], 24) == np.arange(
                    6, dtype=np.float32).tobytes(), case
            del capsule
