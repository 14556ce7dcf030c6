"""The interoperability matrix (SPEC §9): facts it must report, filters, exit status."""

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
    legacy = c["bytes", "tensorflow", "uint8"]
    assert legacy["status"] == "copy"        # a legacy consumer of read-only data: a copy
    assert c["numpy", "torch", "bfloat16"]["status"] == "ok"
    assert c["torch", "memoryview", "bfloat16"]["status"] == "fail"
    assert ("bytes", "torch", "float32") not in c          # bytes cannot make float32
    assert not [x for x in result["cells"] if x["status"] == "wrong"]


def test_renderers(result):
    text = matrix.render_text(result)
    assert "numpy → torch" in text and "zero-copy" in text
    md = matrix.render_markdown(result)
    assert md.count("| numpy → torch |") == 1 and "|---|" in md


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
    assert "broken install" in data["unavailable"]["provider pyarrow"]
    assert data["providers"] == ["bytes"]
