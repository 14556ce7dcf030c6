"""The interoperability matrix (docs/spec.md §9): facts it must report, filters, exit status."""

import json
import os
import subprocess
import sys

import pytest

from dlpack.tests.helpers import lib
from dlpack.tools import matrix, matrix_cases, matrix_env, matrix_text


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
    no_pep3118 = c["torch", "memoryview", "bfloat16"]      # memoryview cannot hold it: proved
    assert no_pep3118["status"] == "unsupported" and "PEP 3118" in no_pep3118["reason"]
    assert no_pep3118["control"]["side"] == "consumer", no_pep3118
    assert no_pep3118["control"]["via"].endswith("→ memoryview")
    assert no_pep3118["control"]["outcome"] == "refused" and no_pep3118["control"]["reason"]
    assert ("bytes", "torch", "float32") not in c          # bytes cannot make float32
    assert not [x for x in result["cells"] if x["status"] == "wrong"]


def test_header_and_pairs(result):
    h = result["header"]
    assert h["pydlpack"] and h["python"] and h["platform"] and h["device"] == "cpu"
    assert "numpy" in h["libraries"] and "torch" in h["libraries"] and h["cuda"] is None
    pair = {(p["provider"], p["consumer"]): p for p in result["pairs"]}
    assert pair["bytes", "torch"]["verdict"] == "readonly_ignored"
    held = pair["numpy", "memoryview"]            # bfloat16 is unsupported: not held, not ✗
    assert held["verdict"] == "ok" and held["dtypes"] == 3 and held["held"] == 2, held
    assert held["counts"]["unsupported"] == 1 and held["counts"]["fail"] == 0
    assert result["schema"] == "pydlpack-matrix/1" and result["exit_status"] == 0


@pytest.mark.parametrize("width", [40, 80, 200])
def test_renderers_fit_and_never_cut(result, width):
    for grid in (False, True):
        text = matrix_text.render_text(result, grid, width)
        lines = text.splitlines()
        long = [line for line in lines if len(line) > width and len(line.split()) > 1]
        assert not long, (grid, width)                 # only a single word may be longer
        assert not [line for line in lines if line != line.rstrip()]
        flat = " ".join(text.split())
        assert "zero-copy" in flat and "torch has no read-only tensors" in flat
        reasons = {c["reason"] for c in result["cells"]
                   if c["reason"] and c["status"] != "unsupported"}
        assert all(" ".join(r.split()) in flat for r in reasons)     # wrapped, whole
        assert "consumers that cannot take them: numpy, memoryview (bfloat16)" in flat
    verbose = " ".join(matrix_text.render_text(result, False, width, True).split())
    for c in result["cells"]:                        # --verbose: each with its control's error
        if c["status"] == "unsupported":
            assert " ".join(matrix_text.explained(c).split()) in verbose
            assert " ".join(c["control"]["reason"].split()) in verbose
    grid = matrix_text.render_text(result, True, width)
    assert "numpy → torch" in grid and "bfloat16" in grid
    if width == 200:                  # one block: each row once, every column on it
        assert grid.count("numpy → torch") == 1
        summary = matrix_text.render_text(result, False, width).splitlines()
        row = next(line for line in summary if line.startswith("numpy (3) "))
        assert len(row.split()) == 2 + 2 * len(result["consumers"])


def test_grid_shows_only_dtypes_with_a_cell():
    lib("numpy")
    run = matrix.build(providers=["bytes"], consumers=["numpy"])
    assert run["dtypes"] == matrix_cases.DTYPES
    grid = matrix_text.render_text(run, grid=True, width=200)
    head = next(line for line in grid.splitlines() if line.startswith("provider → consumer"))
    assert head.split()[3:] == ["uint8"]
    assert matrix_text.render_markdown(run, grid=True).count("| uint8 |") == 1


def test_markdown(result):
    md = matrix_text.render_markdown(result)
    assert "| numpy (3) |" in md and "|---|" in md
    assert matrix_text.render_markdown(result, grid=True).count("| numpy → torch |") == 1


def test_wrong_values_exit_status(monkeypatch):
    lib("numpy")
    monkeypatch.setattr(matrix_cases, "_values", lambda result, name: [9] * 6)
    assert matrix.build(providers=["bytearray"], consumers=["numpy"])["exit_status"] == 1


def test_unreadable_result_is_unverified_not_wrong(monkeypatch):
    lib("numpy")

    def unreadable(result, name):
        raise ValueError("opaque |V2 array")

    monkeypatch.setattr(matrix_cases, "_values", unreadable)
    run = matrix.build(providers=["bytearray"], consumers=["numpy"])
    assert [c["status"] for c in run["cells"]] == ["unverified"]
    assert "opaque" in run["cells"][0]["reason"] and run["exit_status"] == 0


def test_cuda_without_gpu_exits_3_with_the_reason():
    try:
        matrix_env.cuda_info()
    except matrix_env.NoCuda:
        run = run_cli("--device", "cuda")
        assert run.returncode == 3 and run.stdout == ""
        assert "no CUDA device here" in " ".join(run.stderr.split())
        assert max(len(line) for line in run.stderr.splitlines()) <= 80   # not a terminal: 80
        run = run_cli("--device", "cuda", "--json")
        assert run.returncode == 3
        data = json.loads(run.stdout)
        assert data["exit_status"] == 3 and "no CUDA device here" in data["error"]
        assert data["schema"] == "pydlpack-matrix/1" and data["cells"] == []
        assert data["header"]["device"] == "cuda"
    else:
        pytest.skip("a GPU is here")


def test_cuda_json_without_a_driver(monkeypatch, capsys):
    """The same wherever a GPU is: the driver is what the run asks, so make it unloadable."""
    def no_driver():
        raise matrix_env.NoCuda("the CUDA driver (libcuda.so.1) cannot be loaded: test")

    monkeypatch.setattr(matrix, "cuda_info", no_driver)
    assert matrix.main(["--device", "cuda", "--json"]) == 3
    out = capsys.readouterr()
    assert json.loads(out.out)["error"].startswith("--device cuda: no CUDA device here")


@pytest.mark.parametrize("args, words", [
    (["--provider", "bytes", "--dtype", "float32"], ["bytes: uint8"]),
    (["--provider", "cupy"], ["providers here: bytes, bytearray"]),
    (["--consumer", "cupy"], ["consumers here: numpy"]),
])
def test_filters_that_select_nothing_exit_2_with_the_names(args, words, capsys):
    lib("numpy")
    assert matrix.main(args) == 2
    out = capsys.readouterr()
    assert out.out == "" and "the filters select nothing that can run here" in out.err
    for word in words:
        assert word in out.err, out.err
    assert matrix.main(["--json", *args]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["exit_status"] == 2 and data["cells"] == []
    assert all(word in data["error"] for word in words)


@pytest.mark.parametrize("flag", ["--dtype", "--provider", "--consumer"])
@pytest.mark.parametrize("value", [",", " , ", ""])
def test_a_filter_that_names_nothing_exits_2(flag, value, capsys):
    """§9: "--dtype ," selects nothing (it does not mean every dtype): a usage error."""
    with pytest.raises(SystemExit) as e:
        matrix.main([flag, value])
    assert e.value.code == 2 and f"{flag} " in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        matrix.main(["--json", flag, value])
    assert e.value.code == 2
    data = json.loads(capsys.readouterr().out)
    assert data["exit_status"] == 2 and "names no" in data["error"]


def test_build_with_an_empty_filter_runs_nothing():
    assert matrix.build(providers=["bytes"], consumers=["numpy"], dtypes=[])["cells"] == []


def test_nothing_installed_for_the_device_exits_2(monkeypatch, capsys):
    """A GPU but no CUDA library: nothing ran, so a CI job asking for CUDA must not pass."""
    monkeypatch.setattr(matrix, "cuda_info", lambda: {"driver": "12.4", "gpus": ["test"]})
    monkeypatch.setitem(matrix_cases.PROVIDERS, "cupy", ("no_such_module_here", None, "cuda"))
    monkeypatch.setitem(matrix_cases.PROVIDERS, "numba", ("no_such_module_here", None, "cuda"))
    monkeypatch.setitem(matrix_cases.PROVIDERS, "torch.cuda", ("no_such_module_here", None, "cuda"))
    assert matrix.main(["--device", "cuda", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["error"].startswith("nothing installed can run with --device cuda")
    assert data["header"]["cuda"]["gpus"] == ["test"]


def test_json_usage_error_is_json():
    run = run_cli("--json", "--dtype", "float128")
    assert run.returncode == 2 and "unknown --dtype" in run.stderr
    data = json.loads(run.stdout)
    assert data["exit_status"] == 2 and "float128" in data["error"]


def test_help_lists_names_statuses_and_check():
    run = run_cli("--help", env=dict(os.environ, COLUMNS="80"))
    assert run.returncode == 0
    text = run.stdout
    for name in [*matrix_cases.PROVIDERS, *matrix_cases.CONSUMERS, *matrix_cases.STATUSES,
                 *matrix_cases.DTYPES]:
        assert name in text, name
    assert "python -m dlpack check MODULE:FACTORY" in text and "exit status" in text
    assert "check --consumer MODULE:CALLABLE" in text and "docs/check.md" in text
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("columns", [80, 160])
def test_cli_fits_the_terminal(columns):
    lib("numpy")
    run = run_cli("--provider", "bytes,numpy", "--consumer", "numpy,numpy.asarray,memoryview",
                  env=dict(os.environ, COLUMNS=str(columns)))
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and max(len(line) for line in lines) <= columns
    assert not [line for line in lines if line != line.rstrip()]
    if columns > 100:                 # the terminal's width is used, not a fixed one
        assert max(len(line) for line in lines) > 100


def test_same_machine_same_cells():
    """Where NumPy and the stdlib put small arrays decides whether JAX shares them; the
    providers place their data, so two runs agree, and the cells say what they depend on."""
    lib("jax")
    lib("numpy")
    providers = ["bytearray", "array.array", "ctypes", "numpy"]
    first, second = (matrix.build(providers=providers, consumers=["jax"]) for _ in range(2))
    assert first["cells"] == second["cells"]
    c = cells(first)
    for dtype in matrix_cases.DTYPES:
        cell = c["numpy", "jax", dtype]
        assert cell["status"] == "ok" and "64-byte boundary" in cell["note"], cell
    assert all("64-byte boundary" in x["note"] + x["reason"] for x in first["cells"])


def test_alignment_is_measured_and_explains_copies(monkeypatch):
    lib("jax")
    np = lib("numpy")
    assert matrix_cases.alignment_need("jax") == 64
    assert matrix_cases.alignment_need("numpy") is None
    buf = np.zeros(64 + 6 + 1, np.uint8)
    start = -buf.ctypes.data % 64 + 1                    # one byte past a 64-byte boundary
    buf[start:start + 6] = matrix_cases.VALUES
    monkeypatch.setattr(matrix_cases, "make", lambda p, d: buf[start:start + 6])
    cell = matrix_cases.run_cell("numpy", "jax", "uint8", 64)
    assert cell.status == "copy" and "does not start on a 64-byte boundary" in cell.reason


def test_a_provider_that_copies_is_said_to():
    """Pillow's __array_interface__ hands out a new bytes object on every call: nothing of the
    image is shared, whatever the consumer does (not ⚠, not ✓)."""
    lib("PIL")
    lib("numpy")
    lib("torch")
    run = matrix.build(providers=["pillow"], consumers=["numpy", "torch"])
    for cell in run["cells"]:
        assert cell["status"] == "copy" and "the provider copies" in cell["reason"], cell


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
    plain = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for columns, env in ((80, plain), (50, dict(plain, COLUMNS="50"))):
        bad = run_cli("--provider", "foo", env=env)       # the usage error wraps to the width
        assert bad.returncode == 2 and "unknown --provider foo" in bad.stderr
        assert max(len(line) for line in bad.stderr.splitlines()) <= columns, bad.stderr
        assert "numba" in bad.stderr                      # and nothing of it is cut


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
    monkeypatch.setattr(matrix_cases, "_values", lambda result, name: [9] * 6)
    assert matrix.main(["--provider", "bytearray", "--consumer", "numpy", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["cells"][0]["status"] == "wrong"

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(matrix, "build", broken)
    assert matrix.main(["--provider", "bytearray"]) == 1
    assert "run itself failed: RuntimeError: boom" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["--provider", "bytearray", "--consumer", "tensorflow"],
                                     ["check", "dlpack.tools.producers:tensorflow"]])
def test_tensorflow_logs_suppressed(command):
    """TensorFlow logs to descriptor 2 on some CPUs (AVX-512: oneDNN, cpu_feature_guard) and not
    on others, whatever TF_CPP_MIN_LOG_LEVEL says; the level is forced to 0 here so that it logs
    on every machine, and nothing of it may reach the screen."""
    lib("tensorflow")
    run = run_cli(*command, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"))
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", run.stderr


def test_cell_needing_a_missing_library_is_not_run():
    """The README's "matrix of the libraries you already have" with only NumPy and torch: a
    cell whose provider or read-back needs a library that is not installed (NumPy's bfloat16
    and float8 need ml_dtypes) is not run and the library is named (docs/matrix.md
    "not_run"); never ✗ or ? for it. Every other library is made absent for the run (a
    sys.modules entry of None: its import raises ModuleNotFoundError)."""
    lib("numpy")
    lib("torch")
    absent = [m for m, _ in matrix_env.LIBRARIES.values() if m not in ("numpy", "torch")]
    code = (f"import sys; sys.modules.update(dict.fromkeys({absent!r}))\n"
            "from dlpack.tools.matrix import main\n"
            "sys.exit(main(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", code, "--json"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["providers"][-2:] == ["numpy", "torch"] and "jax" not in data["consumers"]
    assert not [c for c in data["cells"] if "ModuleNotFound" in c["reason"]]
    assert not [c for c in data["cells"] if c["status"] == "unverified"]
    skipped = {(x["provider"], x["consumer"], x["dtype"]) for x in data["not_run"]}
    assert skipped == {("numpy", c, d) for c in data["consumers"]
                       for d in ("bfloat16", "float8_e4m3fn", "float8_e5m2")}
    assert {x["library"] for x in data["not_run"]} == {"ml_dtypes"}
    c = cells(data)
    assert c["torch", "torch", "bfloat16"]["status"] == "ok"      # read back without ml_dtypes
    assert c["torch", "numpy.asarray", "float8_e5m2"]["status"] == "ok"
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, COLUMNS="80")).stdout
    assert f"not run: {len(skipped)} cells, which need ml_dtypes" in " ".join(text.split())
    numpy_row = next(line for line in text.splitlines() if line.startswith("numpy ("))
    assert "✗" not in numpy_row and "◐" not in numpy_row and "?" not in numpy_row


def test_ml_types_read_back_from_their_bits():
    """bfloat16 and float8 results, an opaque |V2 ndarray included, are read back from their
    bits: every pattern decodes as ml_dtypes decodes it, and np.asarray cells are verified."""
    np = lib("numpy")
    ml_dtypes = lib("ml_dtypes")
    for name, size in (("bfloat16", 2), ("float8_e4m3fn", 1), ("float8_e5m2", 1)):
        patterns = np.arange(1 << (8 * size), dtype=f"u{size}")
        with np.errstate(invalid="ignore"):        # NaN patterns
            want = patterns.view(getattr(ml_dtypes, name)).astype(np.float64)
        got = np.array([matrix_cases._minifloat(int(b), name) for b in patterns])
        np.testing.assert_array_equal(got, want, err_msg=name)
    lib("torch")
    run = matrix.build(providers=["numpy", "torch"], consumers=["numpy.asarray"],
                       dtypes=["bfloat16", "float8_e4m3fn", "float8_e5m2"])
    assert {c["status"] for c in run["cells"]} == {"ok"}, run["cells"]


def test_reasons_name_the_library_that_raised_them():
    """A failed cell's reason starts with the library that raised it, DLPack type codes decoded
    into dtype names (spec §9)."""
    lib("tensorflow")
    lib("ml_dtypes")
    c = cells(matrix.build(providers=["numpy"], consumers=["tensorflow", "numpy", "memoryview"],
                           dtypes=["float8_e4m3fn"]))
    tf = c["numpy", "tensorflow", "float8_e4m3fn"]["reason"]
    assert tf.startswith("tensorflow: InvalidArgumentError:") and "float8_e4m3fn" in tf, tf
    assert "(DLPack type code 10: float8_e4m3fn)" in tf
    assert c["numpy", "numpy", "float8_e4m3fn"]["reason"].startswith("numpy: ")
    assert c["numpy", "memoryview", "float8_e4m3fn"]["reason"].startswith("pydlpack: DLPackError")


def test_raised_by_and_decoded():
    from dlpack.tools.matrix_reasons import attributed, decoded, raised_by

    class InvalidArgumentError(Exception):
        pass

    InvalidArgumentError.__module__ = "tensorflow.python.framework.errors_impl"
    assert raised_by(InvalidArgumentError("x"), "numpy") == "tensorflow"
    where = {"__name__": "torch.utils.dlpack"}
    exec("def f():\n    raise RuntimeError('inside torch')", where)
    try:
        where["f"]()
    except RuntimeError as e:
        assert raised_by(e, "numpy") == "torch"     # the innermost frame's package
    harness = {"__name__": "dlpack.tools.matrix_cases"}
    exec("def g():\n    int('x')", harness)        # raised in C, called from the matrix
    try:
        harness["g"]()
    except ValueError as e:
        assert raised_by(e, "jaxlib.xla_client") == "jax"
    exec("def h():\n    memoryview(object())", harness)
    try:
        harness["h"]()
    except TypeError as e:
        assert raised_by(e, "builtins") == "Python"
    assert decoded("Unsupported Type Codes: 10") == (
        "Unsupported Type Codes: 10 (DLPack type code 10: float8_e4m3fn)")
    assert decoded("unsupported dtype codes 4, 12") == (
        "unsupported dtype codes 4, 12 (DLPack type codes 4: bfloat, 12: float8_e5m2)")
    assert decoded("type code 99") == "type code 99 (DLPack type code 99: not a DLPack type code)"
    assert decoded("bits 8, lanes 1") == "bits 8, lanes 1"
    assert attributed(InvalidArgumentError(), "numpy", "E: Type Codes: 12").startswith(
        "tensorflow: E: Type Codes: 12 (DLPack type code 12: float8_e5m2)")


def test_a_legacy_consumers_private_copy_names_the_way_to_share():
    lib("jax")
    cell = matrix_cases.run_cell("bytes", "jax", "uint8", matrix_cases.alignment_need("jax"))
    if cell.status == "ok" and "64-byte" in cell.note:
        pytest.skip(f"jax {lib('jax').__version__} asks for versioned capsules, which carry "
                    "READ_ONLY: read-only data is shared, not copied")
    assert cell.status == "copy", cell
    assert "allow_legacy_readonly=True" in cell.reason and "64-byte boundary" in cell.reason


# -- unsupported: a failure proved by a control without pydlpack (spec §9) ------------------------

def _picky(obj):
    """A consumer with no float16, whoever hands it one."""
    arr = lib("numpy").from_dlpack(obj)
    if arr.dtype == "float16":
        raise TypeError("picky has no float16")
    return arr


def _broken_bridge(obj):
    """A consumer that takes float16 from any producer but pydlpack's objects."""
    arr = lib("numpy").from_dlpack(obj)
    if arr.dtype == "float16" and type(obj).__module__.startswith("dlpack"):
        raise BufferError("the bridge dropped it")
    return arr


def _only_pydlpack(obj):
    """A consumer that takes nothing but pydlpack's objects, and no float16: no control can
    run, since no native producer's float32 gets through."""
    if not type(obj).__module__.startswith("dlpack"):
        raise TypeError("only pydlpack objects")
    return _picky(obj)


def _views(run):
    """The run's text (default and --verbose), page and JSON, each flattened."""
    from dlpack.tools.matrix_html import render_html

    flat = " ".join
    return (flat(matrix_text.render_text(run, False, 80).split()),
            flat(matrix_text.render_text(run, False, 80, True).split()),
            flat(render_html(run).replace("&gt;", ">").replace("&#x27;", "'").split()),
            json.loads(json.dumps(run)))


@pytest.mark.parametrize("name, consume, status, outcome, words", [
    ("picky", _picky, "unsupported", "refused", "picky has no float16"),
    ("broken", _broken_bridge, "fail", "passed", "took it as a numpy ndarray of dtype float16"),
    ("only_pydlpack", _only_pydlpack, "fail", "not_run",
     "does not take numpy's float32 either"),
])
def test_a_failure_is_unsupported_only_when_its_control_fails(monkeypatch, name, consume,
                                                              status, outcome, words):
    """float16 from every provider: refused everywhere (unsupported, with the control's own
    error), refused only through pydlpack (fail, pydlpack's own, said first and counted), or
    refused where no control can run (fail, saying why); text, page and JSON agree."""
    lib("numpy")
    monkeypatch.setitem(matrix_cases.CONSUMERS, name, ("builtins", consume, "cpu"))
    run = matrix.build(providers=["numpy", "array.array"], consumers=[name],
                       dtypes=["float16", "float32"])
    c = cells(run)
    cell = c["numpy", name, "float16"]
    assert cell["status"] == status and cell["control"]["outcome"] == outcome, cell
    assert cell["control"]["side"] == "consumer" and words in cell["control"]["reason"], cell
    assert c["numpy", name, "float32"]["status"] == "ok"
    assert c["array.array", name, "float32"]["status"] == "ok"       # it makes no float16
    pair = {(p["provider"], p["consumer"]): p for p in run["pairs"]}["numpy", name]
    assert pair["dtypes"] == 2 and pair["counts"][status] == 1
    assert (pair["verdict"], pair["held"]) == (("ok", 1) if status == "unsupported" else
                                              ("some", 2)), pair
    text, verbose, page, data = _views(run)
    explained = " ".join(matrix_text.explained(cell).split())
    assert data["cells"] == run["cells"] and cell in data["cells"]
    assert explained in verbose and explained in page
    totals = matrix_text.totals(run)
    assert f"1 {matrix_cases.SYMBOLS[status]} {status}" in totals and totals in text
    if status == "unsupported":
        assert explained not in text                  # in short: who cannot hold what
        assert "consumers that cannot take them: " + f"{name} (float16)" in text
        assert "✓ 1/1" in text                        # the pair keeps its ✓ over what it holds
    else:
        assert explained in text
    if outcome == "passed":                           # pydlpack's own failure stands out
        assert explained.startswith("pydlpack's failure: without it, numpy → broken took it")
        assert "(1 of them pydlpack's own: a control without it passes)" in totals
        assert "✗ pydlpack's failure: without it" in text
    if outcome == "not_run":
        assert "no control: no native producer of float16 that only_pydlpack takes" in text


def test_a_control_runs_once_per_consumer_and_dtype(monkeypatch):
    lib("numpy")
    seen = []

    def counting(obj):
        seen.append(type(obj).__module__.split(".")[0])
        return _picky(obj)

    monkeypatch.setitem(matrix_cases.CONSUMERS, "picky", ("builtins", counting, "cpu"))
    run = matrix.build(providers=["numpy", "torch", "jax"], consumers=["picky"],
                       dtypes=["float16"])
    assert {c["status"] for c in run["cells"]} == {"unsupported"}
    natives = [m for m in seen if m != "dlpack"]
    assert len(natives) == len(set(natives)) * 2, seen      # float32 and float16, once each


def test_arrow_bools_are_unsupported_by_the_providers_own_export():
    """Bit-packed bools: pyarrow's own __dlpack__ refuses them; polars has no __dlpack__, and
    its Arrow export's format 'b' is read without pydlpack; DuckDB's one-column table too."""
    lib("numpy")
    lib("pyarrow")
    providers = [p for p in ("pyarrow", "polars", "duckdb") if _installed(p)]
    run = matrix.build(providers=providers, consumers=["numpy"], dtypes=["bool", "int8"])
    c = cells(run)
    own = c["pyarrow", "numpy", "bool"]
    assert own["status"] == "unsupported" and own["control"]["side"] == "provider", own
    assert own["control"]["via"] == "pyarrow's own __dlpack__" and "it-packed" in \
        own["control"]["reason"]
    for p in providers[1:]:
        cell = c[p, "numpy", "bool"]
        assert cell["status"] == "unsupported", cell
        assert cell["control"]["via"] == f"{p}'s Arrow export"
        assert cell["control"]["reason"].startswith("format 'b' (bit-packed bool)")
    assert {c[p, "numpy", "int8"]["status"] for p in providers} <= {"ok", "copy"}


def test_a_provider_that_exports_what_pydlpack_refuses_is_a_fail(monkeypatch):
    """A deliberately broken bridge on the provider's side: pydlpack refuses NumPy's float16,
    which NumPy's own __dlpack__ exports: fail, pydlpack's own."""
    lib("numpy")
    real = matrix_cases.asdlpack

    def broken(obj, *args, **kwargs):
        if getattr(obj, "dtype", None) == "float16":
            raise BufferError("the bridge dropped it")
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(matrix_cases, "asdlpack", broken)
    run = matrix.build(providers=["numpy"], consumers=["numpy"], dtypes=["float16"])
    cell = run["cells"][0]
    assert cell["status"] == "fail" and cell["control"]["side"] == "provider", cell
    assert cell["control"]["outcome"] == "passed"
    assert cell["control"]["via"] == "numpy's own __dlpack__"
    assert matrix_text.explained(cell).startswith("pydlpack's failure: without it, numpy's own")


def _installed(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True
