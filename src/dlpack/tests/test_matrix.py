"""The interoperability matrix (docs/spec.md §9): facts it must report, filters, exit status."""

import json
import os
import subprocess
import sys

import pytest

from dlpack import matrix
from dlpack.tests.helpers import lib


def cells(result):
    return {(c["provider"], c["consumer"], c["dtype"]): c for c in result["cells"]}


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "dlpack", *args], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def result():
    lib("numpy")
    lib("torch")
    return matrix.build(providers=["numpy", "bytes", "torch"],
                        consumers=["torch", "tensorflow", "numpy", "memoryview"],
                        dtypes=["float32", "uint8", "bfloat16"])


def test_known_facts(result):
    lib("tensorflow")
    lib("ml_dtypes")
    c = cells(result)
    assert c["numpy", "torch", "float32"]["status"] == "ok"
    legacy = c["bytes", "tensorflow", "uint8"]        # a legacy consumer of read-only data
    assert legacy["status"] == "copy" and "private copy" in legacy["reason"], legacy
    ignored = c["bytes", "torch", "uint8"]            # torch has no read-only tensors
    assert ignored["status"] == "readonly_ignored" and "torch" in ignored["reason"]
    assert c["bytes", "numpy", "uint8"]["status"] == "ok"       # NumPy keeps it read-only
    assert c["numpy", "torch", "bfloat16"]["status"] == "ok"
    assert c["torch", "memoryview", "bfloat16"]["status"] == "fail"
    assert ("bytes", "torch", "float32") not in c          # bytes cannot make float32
    assert not [x for x in result["cells"] if x["status"] == "wrong"]


def test_header_and_pairs(result):
    h = result["header"]
    assert h["pydlpack"] and h["python"] and h["platform"] and h["device"] == "cpu"
    assert "numpy" in h["libraries"] and "torch" in h["libraries"] and h["cuda"] is None
    pair = {(p["provider"], p["consumer"]): p for p in result["pairs"]}
    assert pair["bytes", "torch"]["verdict"] == "readonly_ignored"
    assert pair["numpy", "memoryview"]["verdict"] == "some"
    assert result["schema"] == "pydlpack-matrix/1" and result["exit_status"] == 0


def test_renderers_fit_and_never_cut(result):
    text = matrix.render_text(result)
    assert "numpy" in text and "zero-copy" in text and "torch has no read-only tensors" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    reasons = {c["reason"] for c in result["cells"] if c["reason"]}
    flat = " ".join(text.split())
    assert all(" ".join(r.split()) in flat for r in reasons)     # wrapped, whole
    grid = matrix.render_text(result, grid=True)
    assert "numpy → torch" in grid and "bfloat16" in grid
    md = matrix.render_markdown(result)
    assert "| numpy |" in md and "|---|" in md
    assert matrix.render_markdown(result, grid=True).count("| numpy → torch |") == 1


def test_wrong_values_exit_status(monkeypatch):
    lib("numpy")
    monkeypatch.setattr(matrix, "_values", lambda result, name: [9] * 6)
    assert matrix.build(providers=["bytearray"], consumers=["numpy"])["exit_status"] == 1


def test_unreadable_result_is_unverified_not_wrong(monkeypatch):
    lib("numpy")

    def unreadable(result, name):
        raise ValueError("opaque |V2 array")

    monkeypatch.setattr(matrix, "_values", unreadable)
    run = matrix.build(providers=["bytearray"], consumers=["numpy"])
    assert [c["status"] for c in run["cells"]] == ["unverified"]
    assert "opaque" in run["cells"][0]["reason"] and run["exit_status"] == 0


def test_cuda_without_gpu_is_one_line():
    try:
        matrix.cuda_info()
    except matrix.NoCuda:
        run = run_cli("--device", "cuda")
        assert run.returncode == 0 and len(run.stdout.splitlines()) == 1
        assert "no CUDA device" in run.stdout
    else:
        pytest.skip("a GPU is here")


def test_cli_json_with_filters():
    lib("numpy")
    run = run_cli("--json", "--provider", "bytearray", "--consumer", "numpy,memoryview",
                  "--dtype", "uint8")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["providers"] == ["bytearray"] and data["consumers"] == ["numpy", "memoryview"]
    assert {(c["consumer"], c["status"]) for c in data["cells"]} == {
        ("numpy", "ok"), ("memoryview", "ok")}


def test_cli_version_and_bad_filter():
    assert run_cli("--version").stdout.startswith("pydlpack ")
    bad = run_cli("--dtype", "float128")
    assert bad.returncode == 2 and "unknown --dtype" in bad.stderr


def test_library_failing_to_import_is_listed(tmp_path):
    lib("numpy")
    (tmp_path / "pyarrow.py").write_text("raise RuntimeError('broken install')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    run = run_cli("--json", "--provider", "pyarrow,bytes", "--consumer", "numpy",
                  "--dtype", "uint8", env=env)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["unavailable"][0]["name"] == "pyarrow"
    assert "broken install" in data["unavailable"][0]["reason"]
    assert data["providers"] == ["bytes"]


def test_consumer_of_another_device_named_once():
    lib("numpy")
    run = run_cli("--provider", "bytes", "--consumer", "numpy,cupy")
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("cupy") == 1 and "consumers cupy — CUDA data" in run.stdout


def test_cli_exit_status_and_text_header(monkeypatch, capsys):
    lib("numpy")
    assert matrix.main(["--provider", "bytearray", "--consumer", "numpy"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("pydlpack ") and "CPython" in text.split("\n")[0]
    assert "libraries: " in text and "numpy " in text
    monkeypatch.setattr(matrix, "_values", lambda result, name: [9] * 6)
    assert matrix.main(["--provider", "bytearray", "--consumer", "numpy", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["cells"][0]["status"] == "wrong"

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(matrix, "build", broken)
    assert matrix.main(["--provider", "bytearray"]) == 1
    assert "run itself failed: RuntimeError: boom" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["--provider", "bytearray", "--consumer", "tensorflow"],
                                     ["check", "dlpack._check_factories:tensorflow"]])
def test_tensorflow_logs_suppressed(command):
    """TensorFlow logs to descriptor 2 on some CPUs (AVX-512: oneDNN, cpu_feature_guard) and not
    on others, whatever TF_CPP_MIN_LOG_LEVEL says; the level is forced to 0 here so that it logs
    on every machine, and nothing of it may reach the screen."""
    lib("tensorflow")
    run = run_cli(*command, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"))
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", run.stderr
