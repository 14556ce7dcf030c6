"""The matrix's controls (docs/spec.md §9): whether a failed exchange is a library's limit
(``unsupported``) or pydlpack's failure (``fail``), proved by running the same thing without
pydlpack.

A cell that raised where pydlpack read the provider is judged on the provider's side: its own
``__dlpack__`` of that dtype (valid once it exports a dtype it holds), else its Arrow export's
format, when that is one no DLPack dtype describes (a bit-packed bool). A cell that raised in
the consumer is judged on the consumer's side: the same consumer is handed each native DLPack
producer's array of that dtype directly (NumPy, ml_dtypes-backed NumPy, torch, JAX), each
producer valid once the consumer takes its float32. ``unsupported`` needs a valid control that
fails and none that passes; a control that cannot run leaves the cell ``fail``, saying why.
Each control runs once per run, per (consumer, dtype) and per (provider, dtype).
"""

from __future__ import annotations

import ctypes
import importlib
import warnings

import dlpack._capsule_api as _capi
from dlpack.tools.check_arrow import ArrowArrayStream, ArrowSchema
from dlpack.tools.matrix_cases import (
    CONSUMERS,
    PROVIDERS,
    Cell,
    _expected,
    _values,
    make,
    reason_of,
)

NATIVE = ("numpy", "torch", "jax")     # the producers a consumer's control is handed
BASELINE = "float32"                   # what a consumer must take from one to be a control
# Arrow formats that hold the values in a layout no DLPack dtype describes.
ARROW_NOT_DLPACK = {"b": "bit-packed bool"}


def _consume(consumer: str, obj, name: str) -> tuple[str, str]:
    """``consumer`` handed ``obj`` directly: ("passed", what it made), ("converted", why its
    result does not hold ``name``'s values) or ("refused", its error)."""
    try:
        result = CONSUMERS[consumer][1](obj)
    except Exception as e:
        return "refused", reason_of(e)
    made = f"{type(result).__module__.partition('.')[0]} {type(result).__name__}"
    if hasattr(result, "dtype"):
        made += f" of dtype {result.dtype}"
    try:
        got = _values(result, name)
    except Exception:
        return "converted", f"took it as a {made}, whose values do not read back as {name}"
    if got != _expected(name):
        return "converted", f"took it as a {made}, which reads back {got}"
    return "passed", f"took it as a {made}"


def _control(side: str, via: str, outcome: str, reason: str) -> dict:
    return {"side": side, "via": via, "outcome": outcome, "reason": reason}


class Controls:
    """The controls of one run, each run once and kept."""

    def __init__(self) -> None:
        self._consumer: dict[tuple[str, str], dict] = {}
        self._provider: dict[tuple[str, str], dict] = {}
        self._baseline: dict[tuple[str, str], bool] = {}

    def judge(self, cell: Cell) -> Cell:
        """A failed ``cell`` with its control run: ``unsupported`` when the control proves the
        side at fault cannot hold the dtype, else still ``fail``, the control said."""
        side = (cell.control or {}).get("side")
        if cell.status != "fail" or side not in ("consumer", "provider"):
            return cell
        if side == "consumer":
            key = (cell.consumer, cell.dtype)
            if key not in self._consumer:
                self._consumer[key] = self._consumer_control(*key)
            control = self._consumer[key]
        else:
            key = (cell.provider, cell.dtype)
            if key not in self._provider:
                self._provider[key] = self._provider_control(*key)
            control = self._provider[key]
        status = "unsupported" if control["outcome"] in ("refused", "converted") else "fail"
        return Cell(cell.provider, cell.consumer, cell.dtype, status, cell.reason, cell.note,
                    dict(control))

    def _takes_baseline(self, consumer: str, producer: str) -> bool:
        key = (consumer, producer)
        if key not in self._baseline:
            try:
                obj = make(producer, BASELINE)
            except Exception:
                self._baseline[key] = False
            else:
                self._baseline[key] = _consume(consumer, obj, BASELINE)[0] == "passed"
        return self._baseline[key]

    def _consumer_control(self, consumer: str, name: str) -> dict:
        """The consumer handed each native producer's ``name`` directly, until one passes;
        else the evidence is a refusal of data its producer's own ``__dlpack__`` exports (the
        refusal is then the consumer's), else any refusal, else a conversion."""
        found: list[tuple[int, str, str, str]] = []
        skipped: list[str] = []
        for producer in NATIVE:
            try:
                importlib.import_module(PROVIDERS[producer][0])
                obj = make(producer, name)
            except Exception as e:               # not installed, or it cannot make the dtype
                skipped.append(f"{producer} cannot make it ({reason_of(e)})")
                continue
            if not self._takes_baseline(consumer, producer):
                skipped.append(f"{consumer} does not take {producer}'s {BASELINE} either")
                continue
            outcome, reason = _consume(consumer, obj, name)
            # the evidence, best first: a pass; a refusal of data its producer exports itself
            # (then the refusal is the consumer's); any refusal; a conversion
            rank = {"passed": 0, "refused": 2, "converted": 3}[outcome]
            if outcome == "refused" and hasattr(obj, "__dlpack__") and not _own_export(obj):
                rank = 1
            found.append((rank, producer, outcome, reason))
            if outcome == "passed":
                break
        if found:
            _, producer, outcome, reason = min(found, key=lambda f: f[0])
            return _control("consumer", f"{producer} → {consumer}", outcome, reason)
        return _control("consumer", consumer, "not_run",
                        f"no native producer of {name} that {consumer} takes: "
                        + "; ".join(skipped))

    def _provider_control(self, provider: str, name: str) -> dict:
        """The provider's own ``__dlpack__`` of ``name``, valid once it exports a dtype it
        holds; else the format of its Arrow export."""
        try:
            obj = make(provider, name)
        except Exception as e:
            return _control("provider", provider, "not_run", f"cannot make it: {reason_of(e)}")
        own = f"{provider}'s own __dlpack__"
        dlpack = hasattr(obj, "__dlpack__")
        if dlpack and any(_exports(provider, d) == "" for d in ("int8", "uint8", "float32")):
            error = _own_export(obj)
            return _control("provider", own, "refused" if error else "passed",
                            error or "exported it")
        fmt = _arrow_format(obj)
        if fmt in ARROW_NOT_DLPACK:
            return _control("provider", f"{provider}'s Arrow export", "refused",
                            f"format {fmt!r} ({ARROW_NOT_DLPACK[fmt]}), which no DLPack dtype "
                            "describes")
        why = f"{own} exports none of int8, uint8, float32" if dlpack else \
            f"{provider} has no __dlpack__ of its own"
        tail = "it has no Arrow export" if fmt is None else \
            f"its Arrow export's format {fmt!r} is one DLPack describes"
        return _control("provider", provider, "not_run", f"{why}, and {tail}")


def _own_export(obj) -> str:
    """The provider's own ``__dlpack__`` called as a versioned consumer would ("" when it
    exports; else its error)."""
    try:
        with warnings.catch_warnings():         # its own deprecation notices are not news
            warnings.simplefilter("ignore")
            try:
                obj.__dlpack__(max_version=(1, 0))
            except TypeError:                   # a producer from before max_version
                obj.__dlpack__()
    except Exception as e:
        return reason_of(e)
    return ""


def _exports(provider: str, name: str) -> str | None:
    """Whether the provider's own ``__dlpack__`` exports ``name`` ("" yes, else the error;
    None when it does not make ``name``)."""
    try:
        obj = make(provider, name)
    except Exception:
        return None
    return _own_export(obj) if hasattr(obj, "__dlpack__") else None


def _format(schema: ArrowSchema) -> str:
    """An Arrow schema's format; a one-column table's (a struct of one child), its column's."""
    if schema.format == b"+s" and schema.n_children == 1:
        return _format(schema.children[0].contents)
    return (schema.format or b"").decode()


def _arrow_format(obj) -> str | None:
    """The format string of ``obj``'s own Arrow C export (schema, array or stream; a
    one-column table's column), read with ctypes alone (None where it has none, or it
    fails)."""
    try:
        if hasattr(obj, "__arrow_c_schema__"):
            capsule = obj.__arrow_c_schema__()
        elif hasattr(obj, "__arrow_c_array__"):
            capsule = obj.__arrow_c_array__()[0]
        elif hasattr(obj, "__arrow_c_stream__"):
            capsule = obj.__arrow_c_stream__()          # released by its capsule's destructor
            stream = ArrowArrayStream.from_address(_capi.GetPointer(capsule,
                                                                    b"arrow_array_stream"))
            schema = ArrowSchema()
            if stream.get_schema(ctypes.byref(stream), ctypes.byref(schema)) != 0:
                return None
            try:
                return _format(schema)
            finally:
                if schema.release:
                    schema.release(ctypes.byref(schema))
        else:
            return None
        return _format(ArrowSchema.from_address(_capi.GetPointer(capsule, b"arrow_schema")))
    except Exception:
        return None
