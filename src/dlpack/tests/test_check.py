"""`python -m dlpack check` (spec §12): real producers; broken ones flagged by the right rule."""

import json
import subprocess
import sys

import pytest

from dlpack.check import RULES, check
from dlpack.check_arrow import RULES as ARROW_RULES
from dlpack.tests.broken_producers import BrokenExchange, Producer
from dlpack.tests.helpers import lib


def verdicts(factory):
    return {r.rule: r.status for r in check(factory)}


def test_correct_producer_passes_every_rule():
    got = verdicts(Producer)
    assert list(got) == RULES
    assert "fail" not in got.values(), got


@pytest.mark.parametrize("fault, rule", [
    ("deleter_twice", "deleter-unconsumed"),
    ("ignores_rename", "deleter-consumed"),
    ("already_used", "capsule-names"),
    ("versioned_as_legacy", "capsule-names"),
    ("no_readonly", "flags"),
    ("null_strides", "strides"),
])
def test_broken_producer_flagged_by_its_rule(fault, rule):
    results = {r.rule: r for r in check(lambda: Producer(**{fault: True}))}
    assert results[rule].status == "fail", results[rule]
    if fault in ("deleter_twice", "ignores_rename", "no_readonly", "null_strides"):
        assert [r for r in results.values() if r.status == "fail"] == [results[rule]]


def test_exchange_api_exporting_a_refused_object_fails():
    got = verdicts(BrokenExchange)
    assert got["exchange-api"] == "fail"
    assert {s for r, s in got.items() if r != "exchange-api"} == {"n/a"}


def test_numpy_and_pydlpack():
    numpy_conforms()
    from dlpack import _check_factories as f

    for factory in (f.numpy, f.pydlpack):
        got = verdicts(factory)
        assert "fail" not in got.values(), (factory, got)
    assert verdicts(f.pydlpack)["exchange-api"] == "pass"


def test_torch_exchange_api_agrees_with_dlpack():
    lib("torch")
    from dlpack import _check_factories as f

    assert verdicts(f.torch)["exchange-api"] == "pass"


def numpy_conforms():
    """NumPy >= 2.3 passes every rule (older releases refuse dl_device copies otherwise)."""
    np = lib("numpy")
    if np.lib.NumpyVersion(np.__version__) < "2.3.0":
        pytest.skip(f"NumPy {np.__version__} predates 2.3, the release the check grades clean")


def test_cli_json_and_exit_status():
    numpy_conforms()
    run = subprocess.run([sys.executable, "-m", "dlpack", "check", "--json",
                          "dlpack._check_factories:numpy",
                          "dlpack.tests.broken_producers:Producer"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["schema"] == "pydlpack-check/1" and data["exit_status"] == 0
    assert [r["factory"] for r in data["reports"]] == ["dlpack._check_factories:numpy",
                                                       "dlpack.tests.broken_producers:Producer"]
    bad = subprocess.run([sys.executable, "-m", "dlpack", "check",
                          "dlpack.tests.broken_producers:BrokenExchange", "nosuchmodule:f"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert "fail  exchange-api" in bad.stdout and "fail  factory" in bad.stdout


def test_every_shipped_factory_is_graded():
    import importlib.util

    from dlpack import _check_factories as f

    needs = {"numpy": "numpy", "numpy_readonly": "numpy", "torch": "torch",
             "torch_requires_grad": "torch", "jax": "jax", "tensorflow": "tensorflow",
             "pyarrow": "pyarrow", "tvm_ffi": "tvm_ffi", "pydlpack": "numpy",
             "pydlpack_bytes": "numpy", "pyarrow_chunked": "pyarrow", "polars": "polars",
             "polars_nulls": "polars", "nanoarrow": "nanoarrow", "arro3": "arro3",
             "pandas": "pandas", "duckdb": "duckdb"}
    assert set(needs) == {n for n in vars(f) if callable(getattr(f, n)) and n[0].islower()}
    specs = [f"dlpack._check_factories:{n}" for n, m in needs.items()
             if importlib.util.find_spec(m) is not None]
    if not specs:
        pytest.skip("no producer library is installed")
    run = subprocess.run([sys.executable, "-m", "dlpack", "check", "--json", *specs],
                         capture_output=True, text=True, timeout=300)
    data = json.loads(run.stdout)
    assert run.returncode == data["exit_status"]
    for report in data["reports"]:
        # DLPack producers, Arrow producers (dlpack.check_arrow) and producers of both
        assert [r["rule"] for r in report["results"]] in (
            RULES, ARROW_RULES, RULES + ARROW_RULES), report
        assert {r["status"] for r in report["results"]} <= {"pass", "fail", "n/a"}
        assert all(r["evidence"] for r in report["results"])
