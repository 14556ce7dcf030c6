"""``python -m dlpack check --consumer MODULE:CALLABLE``: grade a DLPack consumer (spec §12).

``CALLABLE(producer)`` returns the consumer's array (``numpy:from_dlpack``). Each rule hands it
producers built here with ctypes: a ``DLManagedTensorVersioned`` (or legacy ``DLManagedTensor``)
over memory the checker owns, in a capsule whose name, version, flags, ``byte_offset``, strides,
dtype and device the rule chooses, and a deleter that counts its calls (and, for
``deleter-once``, overwrites the data with a pattern, so a dangling array shows it): the probes
of ``check_probes``. Results are read back through ``asdlpack``. The rules run in child
processes through the runner producers share (``_grading.check_isolated``): a consumer that
crashes fails the rule that was running, and the next rule goes on.
"""

from __future__ import annotations

import ctypes
import gc
import os
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import dlpack._capsule_api as _capi
import dlpack.ctypes as dlc
from dlpack._types import FLAG_BITMASK_IS_COPIED, FLAG_BITMASK_READ_ONLY
from dlpack.tools._grading import (
    NA,
    VERSIONED,
    Fail,
    Registry,
    Suite,
    capsule_name,
    named,
    raised,
    said,
    what,
    worker_main,
)
from dlpack.tools.check_probes import (
    PATTERN,
    VALUES,
    ExchangeProbe,
    Layout,
    LegacyProbe,
    Probe,
    Seen,
    seen,
)

RULES = Registry()                  # the consumer rules, in the order they run
WRITTEN = 42.0                      # what read-only writes through the result


# -- the consumer under test ---------------------------------------------------------------------

def _in_this_process(consume: Callable[[object], object]) -> Callable[[object], object]:
    """consume, whose forks without exec end as the call returns in them: a fork that went on
    grading would call the consumer again, and fork again, a chain that never reports."""
    pid = os.getpid()

    def call(producer: object) -> object:
        try:
            return consume(producer)
        finally:
            if os.getpid() != pid:
                os._exit(0)

    return call


class Consumer:
    """The consumer callable, and what basic-import learnt (whether imports share memory)."""

    def __init__(self, consume: Callable[[object], object]) -> None:
        self.consume = _in_this_process(consume)
        self.usable = True          # until basic-import sees it import nothing (a copy is usable)
        self.zero_copy: bool | None = None
        self._alive: list = []

    def state(self) -> dict:
        return {"zero_copy": self.zero_copy, "imports": self.usable}

    def restore(self, state: dict) -> None:     # a crash in basic-import leaves it usable
        self.zero_copy, self.usable = state.get("zero_copy"), state.get("imports", True)

    def case(self, name: str, layout: Layout, *, must_refuse: bool = False) -> tuple[str, str]:
        """One import of ``layout``: ("ok" | "refused" | "wrong" | "unread", what was seen)."""
        probe = Probe(layout)
        print(f"check: trying {name}", file=sys.stderr, flush=True)    # named if it crashes
        try:
            result = self.consume(probe)
        except Exception as e:
            return "refused", named(e)
        if must_refuse:
            self._alive.append(result)      # never read; dropped as the rule ends (grade)
            return "wrong", f"accepted, returned {what(result)}"
        got = seen(result)
        if got is None:
            return "unread", f"returned {what(result)}, which asdlpack cannot read back"
        return _compare(got, layout, probe)


def _compare(got: Seen, layout: Layout, probe: Probe) -> tuple[str, str]:
    """("ok", how) when ``got`` holds the layout's values, else ("wrong", what differs)."""
    if got.shape != layout.shape:
        return "wrong", f"shape {got.shape}, not {layout.shape}"
    if got.dtype != layout.dtype:
        return "wrong", f"dtype (code, bits, lanes) {got.dtype}, not {layout.dtype}"
    if got.data is None:
        return "wrong", f"device {got.device}, not readable on the CPU"
    if got.data != layout.expected():
        return "wrong", f"values {got.data[:16].hex()}, not {layout.expected()[:16].hex()}"
    shared = got.address == probe.first
    return "ok", "shared" if shared else "copied"


def _grade_cases(s: Consumer, cases: dict[str, Layout], must_refuse: bool = False) -> str:
    """Each case's verdict; a wrong one fails the rule, an unreadable result makes it n/a."""
    verdicts = {name: s.case(name, layout, must_refuse=must_refuse)
                for name, layout in cases.items()}
    wrong = [f"{n}: {how}" for n, (v, how) in verdicts.items() if v == "wrong"]
    if wrong:
        raise Fail("; ".join(wrong))
    unread = [f"{n}: {how}" for n, (v, how) in verdicts.items() if v == "unread"]
    if unread and len(unread) == len(verdicts):
        raise NA(unread[0])
    return "; ".join(f"{n}: {'ok' if v == 'ok' else v} ({how})"
                     for n, (v, how) in verdicts.items())


# -- the rules -----------------------------------------------------------------------------------

@RULES.rule("basic-import")
def basic_import(s: Consumer) -> str:
    """A versioned C-contiguous float32 (2, 3) tensor arrives with its values and address."""
    probe = Probe()
    try:
        result = s.consume(probe)
    except Exception as e:
        raise Fail(f"raised {raised(e)}") from None
    asked = len(probe.calls)
    got = None if result is probe else seen(result)     # a proxy asks the probe again
    why = "the producer itself" if result is probe else "an object that exports by asking " \
        "the producer again" if len(probe.calls) > asked else "" if asked or probe.exchanged \
        else "without calling __dlpack__ or the exchange API"
    if why:                          # what the checker would read back is not an import
        s.usable = False
        raise Fail(f"returned {what(result)}, {why}: nothing was imported")
    if got is None:
        raise NA(f"returned {what(result)}, which asdlpack (and numpy.asarray) cannot read")
    verdict, how = _compare(got, Layout(), probe)
    if verdict != "ok":
        raise Fail(how)
    s.zero_copy = how == "shared"
    if not s.zero_copy:
        raise Fail(f"the values arrived, copied (at {got.address:#x}, not the tensor's "
                   f"{probe.first:#x}): DLPack is a zero-copy exchange")
    return f"values right, same address (zero-copy); {named(result)}"


def _called(s: Consumer) -> Probe:
    """A plain probe the consumer was handed, once it called __dlpack__ on it."""
    probe = Probe()
    try:
        s.consume(probe)
    except Exception as e:
        raise Fail(f"raised {raised(e)}") from None
    if not probe.calls:
        raise NA("the consumer never called __dlpack__")
    return probe


@RULES.rule("max-version")
def max_version(s: Consumer) -> str:
    """max_version >= (1, 0) passed; no keywords only after a TypeError (a legacy producer)."""
    probe = _called(s)
    first = probe.calls[0]
    asked = first.get("max_version")
    if asked is None:
        raise Fail(f"__dlpack__({_keywords(first)}): no max_version, so a DLPack 1.x producer "
                   "must send a legacy capsule (READ_ONLY and the version cannot travel)")
    if tuple(asked) < (1, 0):
        raise Fail(f"max_version={tuple(asked)}: below (1, 0)")
    legacy = LegacyProbe()
    try:
        result = s.consume(legacy)
    except Exception as e:
        raise Fail(f"max_version={tuple(asked)}; a producer whose __dlpack__ refuses the "
                   f"keyword with TypeError (pre-2023.12) made it raise {raised(e)} "
                   f"(the array API: retry without it)") from None
    got = seen(result)
    retried = [c for c in legacy.calls if "max_version" not in c]
    verdict = _compare(got, Layout(), legacy)[0] if got else "unread"
    if verdict == "wrong" or not retried:
        raise Fail("a pre-2023.12 producer's legacy capsule was read wrong")
    return (f"__dlpack__({_keywords(first)}); after a TypeError it retried with "
            f"({_keywords(retried[0])}) and read the legacy capsule right")


def _keywords(call: dict) -> str:
    return ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v!r}"
                     for k, v in call.items())


@RULES.rule("capsule-consumed")
def capsule_consumed(s: Consumer) -> str:
    """The imported capsule is renamed used_dltensor_versioned / used_dltensor."""
    seen_names = []
    for probe in (Probe(), Probe(Layout(version=None))):
        try:
            result = s.consume(probe)
        except Exception as e:
            given = "" if probe.layout.version else " (a producer that answers max_version " \
                "with a 'dltensor' capsule, as the array API allows)"
            raise Fail(f"raised {raised(e)}{given}") from None
        names = probe.names()
        if not names:
            raise NA("the consumer never called __dlpack__")
        if not names[-1].startswith("used_"):
            raise Fail(f"after import the capsule is still named {names[-1]!r}: its "
                       "destructor calls the deleter the consumer's array still relies on")
        seen_names.append(f"{names[-1][5:]} → {names[-1]}")
        del result
    return "; ".join(seen_names)


@RULES.rule("deleter-once")
def deleter_once(s: Consumer) -> str:
    """The deleter runs once, after the array and every view of it are gone."""
    probe = Probe(poison=True)
    try:
        result = s.consume(probe)
    except Exception as e:
        raise Fail(f"raised {raised(e)}") from None
    got = seen(result)
    if probe.deleted:
        if got is not None and got.address == probe.first:
            read = "reads the pattern the deleter wrote" if got.data and set(got.data) == {
                PATTERN} else "points at it"
            raise Fail(f"deleter called {probe.deleted}× before the consumer returned, yet "
                       f"its array still uses the tensor's memory ({read}): a dangling array")
        early = f"deleter called when the import returned (the array is a copy{'' if got else '?'})"
    else:
        early = "not called while the array lives"
    try:
        view = result[1:]              # type: ignore[index]
        shares = (v := seen(view)) is not None and v.address != 0 and \
            probe.base <= v.address < probe.base + len(VALUES)
    except Exception:
        view, shares = None, False
    del result, got
    gc.collect()
    if shares:
        if probe.deleted:
            raise Fail("deleter called once the array was dropped, while a view of it "
                       "(result[1:]) still uses the memory")
        early += "; nor while a view (result[1:]) outlives the array"
    del view
    probe.capsules.clear()
    for _ in range(40):              # some libraries free on another thread
        gc.collect()
        if probe.deleted:
            break
        time.sleep(0.05)
    if probe.deleted == 0:
        raise Fail("deleter never called after the array and its views were gone (and "
                   "the capsule dropped): the tensor leaks")
    if probe.deleted > 1:
        raise Fail(f"deleter called {probe.deleted} times: the producer frees it twice")
    return f"{early}; called once after"


def _write(result: Any, ndim: int) -> str:
    """Write WRITTEN through the consumer's own API; what happened."""
    try:
        result[(0,) * ndim] = WRITTEN
    except Exception as e:
        return f"result[0, 0] = {WRITTEN} raised {named(e)}"
    return f"result[0, 0] = {WRITTEN} worked"


def _reexport_writable(result: Any, probe: Probe) -> bool:
    """Whether the result's own ``__dlpack__`` hands the producer's memory on without
    READ_ONLY (the next consumer writes into it)."""
    try:
        capsule = result.__dlpack__(max_version=(1, 3))
        name = capsule_name(capsule)
        m = dlc.DLManagedTensorVersioned.from_address(_capi.GetPointer(capsule, name))
    except Exception:
        return False
    if name != VERSIONED:
        return False
    first = (m.dl_tensor.data or 0) + m.dl_tensor.byte_offset
    return first == probe.first and not m.flags & FLAG_BITMASK_READ_ONLY


@RULES.rule("read-only")
def read_only(s: Consumer) -> str:
    """A READ_ONLY tensor is refused, copied or read-only: writes never reach its memory."""
    probe = Probe(Layout(flags=FLAG_BITMASK_READ_ONLY))
    try:
        result = s.consume(probe)
    except Exception as e:
        return f"refused ({raised(e)})"
    wrote = _write(result, 2)
    if ctypes.string_at(probe.first, len(VALUES)) != VALUES:
        raise Fail(f"{wrote}, and the write reached the producer's read-only memory")
    if _reexport_writable(result, probe):
        raise Fail(f"{wrote}, but the array shares the read-only memory and its __dlpack__ "
                   "exports it without READ_ONLY: the next consumer writes into it")
    return f"{wrote}; the producer's memory is unchanged"


@RULES.rule("byte-offset")
def byte_offset(s: Consumer) -> str:
    """A non-zero byte_offset is honoured."""
    layout = Layout(shape=(4,), strides=(1,), byte_offset=8)
    verdict, how = s.case("byte_offset 8", layout)
    if verdict == "unread":
        raise NA(how)
    if verdict != "ok":
        raise Fail(f"byte_offset 8 over 0..5 (expected 2, 3, 4, 5): {verdict} ({how})")
    return f"byte_offset 8: values 2, 3, 4, 5 ({how})"


_STRIDES = {
    "legacy NULL": Layout(strides=None, version=None),
    "v1.1 NULL": Layout(strides=None, version=(1, 1)),
    "step 2": Layout(shape=(3,), strides=(2,)),
    "transposed": Layout(shape=(3, 2), strides=(1, 3)),
    "negative": Layout(shape=(6,), strides=(-1,), offset=20),
    "zero": Layout(shape=(3,), strides=(0,), offset=4),
    "extent 0": Layout(shape=(0, 3), strides=(3, 1)),
    "extent 1": Layout(shape=(1, 3), strides=(7, 1)),
}


@RULES.rule("strides")
def strides(s: Consumer) -> str:
    """NULL, non-contiguous, negative and zero strides, extents 0 and 1: right or refused."""
    return _grade_cases(s, _STRIDES)


def _dtype_cases() -> dict[str, Layout]:
    """Each DLPack type of at most 128 bits, six values (0..5 where they are numbers)."""
    cases = {}
    for code, kind, sizes, fmt in ((0, "int", (8, 16, 32, 64), "bhiq"),
                                   (1, "uint", (8, 16, 32, 64), "BHIQ"),
                                   (2, "float", (16, 32, 64), "efd")):
        for bits, f in zip(sizes, fmt, strict=True):
            cases[f"{kind}{bits}"] = Layout(struct.pack(f"<6{f}", *range(6)), (6,), (1,),
                                            (code, bits, 1))
    cases["bfloat16"] = Layout(b"".join(VALUES[i + 2:i + 4] for i in range(0, 24, 4)), (6,),
                               (1,), (4, 16, 1))
    for bits, f in ((64, "f"), (128, "d")):
        cases[f"complex{bits}"] = Layout(struct.pack(f"<12{f}", *range(12)), (6,), (1,),
                                         (5, bits, 1))
    cases["bool"] = Layout(bytes([0, 1, 1, 0, 1, 0]), (6,), (1,), (6, 8, 1))
    for code in range(7, 15):                  # the float8 codes; bit patterns valid in all
        cases[f"float8 code {code}"] = Layout(bytes([0, 0x38, 0x40, 0x44, 0x48, 0x4A]), (6,),
                                              (1,), (code, 8, 1))
    return cases


@RULES.rule("dtypes")
def dtypes(s: Consumer) -> str:
    """Every DLPack type (int, uint, float, bfloat, complex, bool, float8): right or refused."""
    verdicts = {name: s.case(name, layout) for name, layout in _dtype_cases().items()}
    wrong = [f"{n}: {how}" for n, (v, how) in verdicts.items() if v == "wrong"]
    if wrong:
        raise Fail("; ".join(wrong))
    groups: dict[str, list[str]] = {}
    for name, (verdict, how) in verdicts.items():
        groups.setdefault("ok" if verdict == "ok" else f"{verdict} ({how})", []).append(name)
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items())


@RULES.rule("device")
def device(s: Consumer) -> str:
    """A tensor on a device the consumer lacks (CUDA) is refused with an exception."""
    probe = Probe(Layout(device=(2, 0)))
    try:
        result = s.consume(probe)
    except Exception as e:
        asked = [c["dl_device"] for c in probe.calls if c.get("dl_device") is not None]
        how = f"asked dl_device={tuple(asked[0])}: the producer's BufferError passed on" \
            if asked and not probe.capsules else "refused the CUDA capsule"
        bufferror = "" if issubclass(type(e), BufferError) else \
            "; the array API asks for BufferError"
        return f"{how}: {named(e)} ({said(e)}){bufferror}"
    got = seen(result)
    if got is not None and got.device == (2, 0):
        return "returned an array on CUDA 0"
    s._alive.append(result)
    raise Fail(f"returned {what(result)} on device {got.device if got else '?'} for a CUDA "
               "tensor: a wrong-device array over device memory")


@RULES.rule("stream")
def stream(s: Consumer) -> str:
    """For CPU data the consumer passes stream=None or no stream."""
    probe = _called(s)
    given = [c["stream"] for c in probe.calls if c.get("stream") is not None]
    if given:
        raise Fail(f"stream={given[0]!r} for CPU data: the array API says None")
    passed = any("stream" in c for c in probe.calls)
    return "stream=None" if passed else "no stream keyword"


@RULES.rule("flags")
def flags(s: Consumer) -> str:
    """IS_COPIED and unknown future flag bits change nothing."""
    seen_flags = []
    for name, value in (("IS_COPIED", FLAG_BITMASK_IS_COPIED),
                        ("unknown bits 1<<3|1<<62", 1 << 3 | 1 << 62)):
        verdict, how = s.case(name, Layout(flags=value))
        if verdict == "unread":
            raise NA(how)
        if verdict != "ok":
            raise Fail(f"{name}: {verdict} ({how}); without the flag it imports")
        if s.zero_copy is not None and (how == "shared") != s.zero_copy:
            raise Fail(f"{name}: {how}, unlike the same tensor without it")
        seen_flags.append(f"{name}: same values, {how}")
    return "; ".join(seen_flags)


_HOSTILE_OK = {
    "ndim 0 (NULL shape)": Layout(shape=(), strides=None),
    "ndim 1000": Layout(payload=VALUES[:4], shape=(1,) * 1000, strides=(1,) * 1000),
}
_HOSTILE_BAD = {
    "extents overflow int64": Layout(shape=(1 << 40, 1 << 40), strides=(1 << 40, 1)),
    "byte size overflows": Layout(shape=(1 << 61,), strides=(1,)),
    "NULL data, 6 elements": Layout(shape=(6,), strides=(1,), null_data=True),
    "negative ndim": Layout(shape=(6,), strides=(1,), ndim=-1),
    "negative extent": Layout(shape=(-1,), strides=(1,)),
}


@RULES.rule("hostile")
def hostile(s: Consumer) -> str:
    """ndim 0 and 1000 right or refused; overflowing sizes, NULL data, negative ndim refused."""
    return _grade_cases(s, _HOSTILE_OK) + "; " + _grade_cases(s, _HOSTILE_BAD, must_refuse=True)


@RULES.rule("exchange-api")
def exchange_api(s: Consumer) -> str:
    """If the consumer uses __dlpack_c_exchange_api__, it agrees with its __dlpack__ path."""
    seen_paths = []
    for name, layout in (("writable", Layout()), ("READ_ONLY", Layout(
            flags=FLAG_BITMASK_READ_ONLY))):
        outcomes = []
        for probe in (ExchangeProbe(layout), Probe(layout)):
            try:
                result = s.consume(probe)
            except Exception as e:
                result = e
            if isinstance(probe, ExchangeProbe) and not probe.exchanged:
                raise NA("never asked for __dlpack_c_exchange_api__ (it called __dlpack__)")
            if issubclass(type(result), Exception):
                outcomes.append(f"refused ({named(result)})")
                continue
            got = seen(result)
            verdict, how = _compare(got, layout, probe) if got else ("unread", "")
            wrote = _write(result, 2) if name == "READ_ONLY" else ""
            if ctypes.string_at(probe.first, len(VALUES)) != layout.payload:
                wrote = "written through"
            outcomes.append(f"{verdict} {how} {'read-only' if got and got.readonly else ''}"
                            f" {wrote}".strip())
        if outcomes[0] != outcomes[1]:
            raise Fail(f"{name}: exchange API → {outcomes[0]}; __dlpack__ → {outcomes[1]}")
        seen_paths.append(f"{name}: both {outcomes[0]}")
    return "; ".join(seen_paths)


SUITE = Suite("dlpack.tools.check_consumer", (RULES,), Consumer, "the consumer crashed",
              "importing CALLABLE", load_rule="consumer", who="consumer")

if __name__ == "__main__":
    worker_main(sys.argv[1:], SUITE)
