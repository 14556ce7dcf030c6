"""`python -m dlpack check` (spec §12): real producers; broken ones flagged by the right rule."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

from dlpack.tests import broken_producers
from dlpack.tests.broken_producers import EXPECTED, BrokenExchange, Producer
from dlpack.tests.helpers import lib
from dlpack.tools import _grading
from dlpack.tools._grading import check_isolated
from dlpack.tools.check import PRODUCERS, check

RULES = PRODUCERS.rules         # the producer rules, then the Arrow rules


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
    ("shares_on_copy", "device-copy"),
])
def test_broken_producer_flagged_by_its_rule(fault, rule):
    results = {r.rule: r for r in check(lambda: Producer(**{fault: True}))}
    assert results[rule].status == "fail", results[rule]
    if fault in ("deleter_twice", "ignores_rename", "no_readonly", "null_strides",
                 "shares_on_copy"):
        assert [r for r in results.values() if r.status == "fail"] == [results[rule]]


def test_copy_sharing_memory_says_how_to_fix_it():
    evidence = {r.rule: r for r in check(lambda: Producer(shares_on_copy=True))}[
        "device-copy"].evidence
    assert "copy=True returned the same memory" in evidence
    assert "copy the data" in evidence and "or raise BufferError" in evidence, evidence


def test_exchange_api_exporting_a_refused_object_fails():
    got = verdicts(BrokenExchange)
    assert got["exchange-api"] == "fail" and got["basic-export"] == "fail"
    assert {s for r, s in got.items() if r not in ("exchange-api", "basic-export")} == {"n/a"}


def run_check(*specs, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "dlpack", "check", *specs],
                          capture_output=True, text=True, timeout=timeout, env=env)


BROKEN = "dlpack.tests.broken_producers:"


def crash_env(**extra):
    """The environment for graders of producers that crash on purpose: under the sanitizer job
    (ASan), the signal is left to the process, so the checker sees it as on a normal build."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    return dict(os.environ, ASAN_OPTIONS=":".join(filter(None, [
        asan, "handle_segv=0", "handle_sigbus=0", "handle_sigill=0", "handle_abort=0"])),
        **extra)


@pytest.fixture(scope="module")
def broken_reports():
    """Every producer of broken_producers.EXPECTED graded by the CLI once, in JSON."""
    run = run_check("--json", *[BROKEN + name for name in EXPECTED], env=crash_env())
    assert run.returncode == 1, run.stderr
    data = json.loads(run.stdout)
    assert data["exit_status"] == 1
    return {r["factory"].removeprefix(BROKEN): {x["rule"]: x for x in r["results"]}
            for r in data["reports"]}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_broken_producer_fails_by_its_rule_without_crashing_the_checker(broken_reports, name):
    results = broken_reports[name]
    rule = EXPECTED[name]
    assert results[rule]["status"] == "fail", results[rule]
    assert [r for r, x in results.items() if x["status"] == "fail"] == [rule], results
    if rule == "factory":
        assert list(results) == ["factory"]
    else:
        assert list(results) == RULES
    if rule == "basic-export":       # nothing else is asked of a producer that cannot export
        assert {x["status"] for r, x in results.items() if r != rule} == {"n/a"}


@pytest.mark.parametrize("name, words", [
    ("returns_none", ["returned NoneType None", "not a DLPack producer"]),
    ("returns_42", ["returned int 42", "no __dlpack__"]),
    ("AlwaysRaises", ["raised RuntimeError: export is not implemented"]),
    ("ReturnsStr", ["returned str 'dltensor', not a PyCapsule"]),
    ("WildPointer", ["points at 0x10, which is not readable memory"]),
    ("SameCapsule", ["the same capsule object twice"]),
    ("SameStruct", ["hold the same managed tensor", "double free"]),
    ("NullExchange", ["NULL entry points managed_tensor_allocator", "nothing was called"]),
    ("BadDevice", ["returned ('cpu', 0): device_type is str 'cpu', not an int"]),
    ("ReadOnlyBytes", ["READ_ONLY missing", "__array_interface__ data is a bytes object",
                       "read-only"]),
    ("CrashOnCopy", ["the producer crashed a consumer: signal 11 (SIGSEGV)",
                     "broken_producers.py", "in __dlpack__"]),
    ("WildDeleter", ["the producer crashed a consumer: signal 11", "in destructor"]),
    ("crashing_factory", ["FACTORY ended the checker's child process: signal 11",
                          "in crashing_factory"]),
])
def test_broken_producer_evidence(broken_reports, name, words):
    evidence = broken_reports[name][EXPECTED[name]]["evidence"]
    for word in words:
        assert word in evidence, evidence
    for leak in ("PyCapsule_GetName", "invalid literal", "Traceback"):
        assert leak not in evidence, evidence


def test_a_producer_writing_into_the_result_channel_fails_without_crashing_the_checker():
    run = run_check("--json", BROKEN + "scribbling_factory")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    (report,) = json.loads(run.stdout)["reports"]
    (result,) = report["results"]
    assert result["rule"] == "factory" and result["status"] == "fail", result
    assert "result channel" in result["evidence"] and "not a checker message" in \
        result["evidence"], result


def test_rules_after_a_crash_are_graded_in_a_new_child(broken_reports):
    results = broken_reports["CrashOnCopy"]
    assert results["stream"]["status"] == "n/a" and "stream=None accepted" in \
        results["stream"]["evidence"]
    assert results["exchange-api"]["evidence"] == "no __dlpack_c_exchange_api__ on the type"
    assert all(results[r]["status"] == "pass" for r in RULES[:RULES.index("device-copy")])


def test_text_of_a_crash_keeps_every_line():
    run = run_check(BROKEN + "CrashOnCopy", BROKEN + "Producer", env=crash_env(COLUMNS="80"))
    assert run.returncode == 1 and run.stderr == "", run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"python -m dlpack check {BROKEN}CrashOnCopy"
    assert any(line.startswith("  fail  device-copy ") for line in lines)
    assert f"python -m dlpack check {BROKEN}Producer" in lines
    assert lines[-1] == "  every rule passed or does not apply"


def test_lines_are_printed_as_decided():
    """While a rule hangs, the lines of the rules before it are already out."""
    child = subprocess.Popen([sys.executable, "-m", "dlpack", "check", BROKEN + "Hangs"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True,
                             env=dict(os.environ, COLUMNS="300"))
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in child.stdout], daemon=True).start()
    try:
        seen = []
        while not seen or not seen[-1].startswith("  pass  byte-offset-alignment"):
            seen.append(lines.get(timeout=120))
        assert child.poll() is None, seen          # device-copy is still running
        assert [x.split()[1] for x in seen[1:]] == RULES[:RULES.index("device-copy")]
    finally:
        os.killpg(child.pid, signal.SIGKILL)       # the checker and its child
        child.wait()


def test_a_rule_that_hangs_fails_and_the_rest_resume(monkeypatch):
    monkeypatch.setattr(_grading, "TIMEOUT", 10)
    results = {r.rule: r for r in check_isolated(BROKEN + "Hangs", PRODUCERS)}
    assert results["device-copy"].status == "fail"
    assert "did not finish" in results["device-copy"].evidence
    assert results["stream"].status == "n/a" and results["basic-export"].status == "pass"


def test_a_forked_daemon_holding_the_channel_does_not_hold_the_checker(tmp_path, monkeypatch):
    """§12: the checker stops reading once every rule has reported (or the worker has exited),
    not when every process holding the channel has closed it: the daemon the factory forked
    is still alive when the results are in."""
    pid_file = tmp_path / "daemon.pid"
    monkeypatch.setenv("DLPACK_TEST_DAEMON_PID", str(pid_file))
    monkeypatch.setenv("DLPACK_TEST_DAEMON_SECONDS", "60")
    try:
        results = list(check_isolated(BROKEN + "forks_a_daemon", PRODUCERS))
        assert not (tmp_path / "daemon.pid.done").exists()     # the daemon is still running
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert [r.rule for r in results] == RULES
    assert all(r.status in ("pass", "n/a") for r in results), results


def test_a_producer_forking_in_dlpack_gets_one_report_per_rule():
    """§12: only the worker process reports; its fork ends at its first report."""
    results = list(check_isolated(BROKEN + "ForksInDlpack", PRODUCERS))
    assert [r.rule for r in results] == RULES
    assert all(r.status in ("pass", "n/a") for r in results), results


def test_in_process_verdicts_and_messages():
    """check() in this process gives the CLI's verdicts for producers that do not crash."""
    for factory, rule in [(broken_producers.returns_42, "basic-export"),
                          (broken_producers.ReturnsStr, "basic-export"),
                          (broken_producers.BadDevice, "device-copy"),
                          (broken_producers.ReadOnlyBytes, "flags"),
                          (broken_producers.NullExchange, "exchange-api")]:
        got = verdicts(factory)
        assert [r for r, s in got.items() if s == "fail"] == [rule], (factory, got)


class _Shouts(Exception):
    def __str__(self):
        return "no " * 1_000_000


class _Mute(Exception):
    def __str__(self):
        raise RuntimeError("no text")


class _Raises:
    """A producer whose __dlpack__ raises what it was given."""

    def __init__(self, error):
        self.error = error

    def __dlpack__(self, **kwargs):
        raise self.error

    def __dlpack_device__(self):
        return (1, 0)


def test_evidence_is_bounded_and_survives_a_hostile_str():
    """A producer's exception text is evidence on one line of at most EVIDENCE_LIMIT
    characters (a megabyte message would flood the report), and one whose str() raises fails
    its rule, not the checker."""
    shouted = check(lambda: _Raises(_Shouts()))
    assert all(len(r.evidence) <= _grading.EVIDENCE_LIMIT + 40 for r in shouted), shouted
    assert any("more characters)" in r.evidence for r in shouted)
    mute = check(lambda: _Raises(_Mute()))
    assert mute[0].status == "fail" and "RuntimeError" in mute[0].evidence, mute


class _Plain(str):
    """What a hostile __str__ may return: a str whose methods raise."""

    def __format__(self, spec):
        raise RuntimeError("__format__")

    def __getitem__(self, index):
        raise RuntimeError("__getitem__")

    def split(self, *args):
        raise RuntimeError("split")


class _Nameless(type):
    @property
    def __name__(cls):
        raise RuntimeError("__name__")


class _Unnamed(Exception, metaclass=_Nameless):
    pass


class _Masked(Exception):
    def __str__(self):
        return _Plain("masked")


class _Copies:
    """Exports NumPy's array, but raises error where asked for a copy. It refuses a device
    change itself: NumPy before 2.3 (Python 3.10's newest) raised ValueError there."""

    def __init__(self, error):
        self.a, self.error = lib("numpy").arange(4.0), error

    def __dlpack__(self, **kwargs):
        if kwargs.get("copy"):
            raise self.error
        if kwargs.get("dl_device") not in (None, (1, 0)):
            raise BufferError("only the CPU")
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class _NamelessRefusal(BufferError, metaclass=_Nameless):
    def __str__(self):
        return "no" * (2 << 20)


def test_a_hostile_refusal_is_a_refusal():
    """A BufferError subclass whose __name__ raises and whose message is 4 MB refuses a copy
    as BufferError("no") does: device-copy passes, its evidence bounded."""
    got = {r.rule: r for r in check(lambda: _Copies(_NamelessRefusal()))}["device-copy"]
    assert got.status == "pass" and "copy=True refused with BufferError (nono" in got.evidence
    assert len(got.evidence) <= _grading.EVIDENCE_LIMIT + 40, got


@pytest.mark.parametrize("error", [_Masked(), _Unnamed("unnamed")])
def test_a_hostile_exception_fails_its_rule_not_the_checker(error):
    """An exception that reaches the grader (a rule does not expect it) may have a str() that
    is a str subclass whose methods raise, or a metaclass whose __name__ raises: the rule fails
    with what it said, the checker goes on."""
    got = {r.rule: r for r in check(lambda: _Copies(error))}
    assert got["basic-export"].status == "pass"
    assert any(r.status == "fail" and "raised" in r.evidence for r in got.values()), got


def test_crash_evidence_is_bounded_too():
    """What a crashed child said last (its stderr, the producer's to write) is evidence as a
    producer's exception message is: one printable line, at most EVIDENCE_LIMIT characters."""
    results = list(check_isolated(BROKEN + "ShoutsOnCopy", PRODUCERS))
    crashed = [r for r in results if "exit status 3" in r.evidence]
    assert len(crashed) == 1, results
    assert len(crashed[0].evidence) <= _grading.EVIDENCE_LIMIT + 40, len(crashed[0].evidence)
    assert "\x1b" not in crashed[0].evidence and "more characters)" in crashed[0].evidence


@pytest.mark.parametrize(("said", "shown"), [
    (" " * 1990 + "a\nb\n\x1b[2Jc", "a b \\x1b[2Jc"),   # whitespace past the first 2000
    ("x\x08\x00y \ud800", "x\\x08\\x00y \\ud800"),      # control characters, a surrogate
    ("a" * 600, "a" * 500 + "… (100 more characters)"),
    ("a " * 250 + "b", "a " * 249 + "a… (1 more characters)"),
])
def test_evidence_is_one_line_of_printable_text(said, shown):
    """Whatever a producer's text holds, its evidence is one line of printable characters
    (a terminal escape or a lone surrogate would garble the report or fail its encoding),
    at most EVIDENCE_LIMIT of them and a count of what was cut."""
    assert _grading._evidence(said) == shown


@pytest.mark.parametrize("columns", [80, 200])
def test_text_fits_the_terminal(columns):
    run = run_check(BROKEN + "BrokenExchange", BROKEN + "Producer",
                    env=dict(os.environ, COLUMNS=str(columns)))
    lines = run.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert not [line for line in lines if line != line.rstrip()]
    column = lines[1].index("__dlpack__")              # where the evidence starts
    for line in lines:
        if line.startswith(" " * 8):                   # continuation: under the evidence
            assert len(line) - len(line.lstrip()) == column, line
    if columns > 100:
        assert max(len(line) for line in lines) > 100      # the width is used, not fixed


def test_json_usage_error_is_json():
    run = run_check("--json")
    assert run.returncode == 2 and "usage:" in run.stderr
    data = json.loads(run.stdout)
    assert data["exit_status"] == 2 and "MODULE:FACTORY" in data["error"]


def test_help_lists_the_rules():
    """Each rule with its whole first paragraph (never cut mid-sentence), in one column that
    the longest name fits."""
    run = run_check("--help", env=dict(os.environ, COLUMNS="80"))
    assert run.returncode == 0
    assert max(len(line) for line in run.stdout.splitlines()) <= 80
    from dlpack.tools import check_consumer

    body = run.stdout.split("rules, in the order they run")[1].split("\nexit status")[0]
    producers, consumers = body.split("\n\n--consumer")
    for text, names in ((producers, RULES), (consumers, check_consumer.SUITE.rules)):
        rows = text.strip("\n").split("\n")[1:]
        column = max(len(n) for n in names) + 3
        starts = [r for r in rows if not r.startswith(" " * column)]
        assert [r.split()[0] for r in starts] == list(names)
        for r in rows:
            assert r[column - 1] == " " and r[column] != " ", r     # names never overrun
        described: dict[str, str] = {}
        for r in rows:
            if r in starts:
                name = r.split()[0]
            described[name] = (described.get(name, "") + " " + r[column:]).strip()
        for name, line in described.items():
            assert line.endswith("."), (name, line)


def test_factory_without_a_colon_is_a_usage_error():
    run = run_check("myfactories", env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert run.returncode == 2 and "expected MODULE:FACTORY" in run.stderr
    assert max(len(line) for line in run.stderr.splitlines()) <= 80
    data = json.loads(run_check("--json", "dlpack.tools.producers").stdout)
    assert data["exit_status"] == 2 and "dlpack.tools.producers" in data["error"]


def test_numpy_and_pydlpack():
    numpy_conforms()
    from dlpack.tools import producers as f

    for factory in (f.numpy, f.pydlpack):
        got = verdicts(factory)
        assert "fail" not in got.values(), (factory, got)
    assert verdicts(f.pydlpack)["exchange-api"] == "pass"


def test_torch_exchange_api_agrees_with_dlpack():
    lib("torch")
    from dlpack.tools import producers as f

    assert verdicts(f.torch)["exchange-api"] == "pass"


def numpy_conforms():
    """NumPy >= 2.3 passes every rule (older releases refuse dl_device copies otherwise)."""
    np = lib("numpy")
    if np.lib.NumpyVersion(np.__version__) < "2.3.0":
        pytest.skip(f"NumPy {np.__version__} predates 2.3, the release the check grades clean")


def test_cli_json_and_exit_status():
    numpy_conforms()
    run = subprocess.run([sys.executable, "-m", "dlpack", "check", "--json",
                          "dlpack.tools.producers:numpy",
                          "dlpack.tests.broken_producers:Producer"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["schema"] == "pydlpack-check/1" and data["exit_status"] == 0
    assert [r["factory"] for r in data["reports"]] == ["dlpack.tools.producers:numpy",
                                                       "dlpack.tests.broken_producers:Producer"]
    bad = run_check("dlpack.tests.broken_producers:BrokenExchange", timeout=120)
    assert bad.returncode == 1 and "fail  exchange-api" in bad.stdout
    allowed = run_check("--allow-fail", "exchange-api",
                        "dlpack.tests.broken_producers:NullExchange", timeout=120)
    assert allowed.returncode == 0, allowed.stdout
    assert "(allowed failure, --allow-fail)" in allowed.stdout
    assert allowed.stdout.splitlines()[-1] == "  1 rule failed, allowed by --allow-fail"


@pytest.mark.parametrize("spec, words", [
    ("nosuchmodule:f", ["ModuleNotFoundError", "runs from", "on PYTHONPATH?"]),
    ("dlpack.tests.broken_producers:NoSuchFactory", ["AttributeError", "NoSuchFactory"]),
])
def test_a_factory_that_cannot_be_imported_is_a_usage_error(spec, words):
    """§12: a MODULE:FACTORY that does not import or resolve exits 2, as a consumer's does;
    nothing is graded, and the message hints at the module path."""
    run = run_check(spec, timeout=120)
    assert run.returncode == 2 and run.stdout == "", run.stdout
    said = " ".join(run.stderr.split())             # argparse wraps where the cwd's length says
    for word in words:
        assert word in said, run.stderr
    data = json.loads(run_check("--json", "dlpack.tests.broken_producers:Producer", spec,
                                timeout=120).stdout)
    assert data["exit_status"] == 2 and spec in data["error"]


def test_allow_fail_names_a_rule_of_the_checker_run():
    """--allow-fail takes the rules of the direction graded: a consumer rule (hostile) for
    producers is a usage error, as is a misspelt one."""
    for args in (["--allow-fail", "hostile"], ["--consumer", "--allow-fail", "basic-export"],
                 ["--allow-fail", "exchange_api"]):
        run = run_check("--json", *args, "dlpack.tests.broken_producers:Producer", timeout=120)
        assert run.returncode == 2, (args, run.stdout)
        assert "no such" in json.loads(run.stdout)["error"]


def test_allow_fail_refuses_the_first_rule():
    """§12: the first rule gates every other, so allowing it would pass what nothing graded."""
    for args in (["--allow-fail", "basic-export"], ["--consumer", "--allow-fail", "basic-import"]):
        run = run_check("--json", *args, "dlpack.tests.broken_producers:Producer", timeout=120)
        assert run.returncode == 2, (args, run.stdout)
        assert "graded only when it passes" in json.loads(run.stdout)["error"]


def test_every_shipped_factory_is_graded():
    import importlib.util

    from dlpack.tools import producers as f

    needs = {"numpy": "numpy", "numpy_readonly": "numpy", "torch": "torch",
             "torch_requires_grad": "torch", "jax": "jax", "tensorflow": "tensorflow",
             "tensorflow_tensor": "tensorflow",
             "pyarrow": "pyarrow", "tvm_ffi": "tvm_ffi", "pydlpack": "numpy",
             "pydlpack_bytes": "numpy", "pyarrow_chunked": "pyarrow", "polars": "polars",
             "polars_nulls": "polars", "nanoarrow": "nanoarrow", "arro3": "arro3",
             "pandas": "pandas", "duckdb": "duckdb"}
    assert set(needs) == {n for n in vars(f) if callable(getattr(f, n)) and n[0].islower()}
    specs = [f"dlpack.tools.producers:{n}" for n, m in needs.items()
             if importlib.util.find_spec(m) is not None]
    if not specs:
        pytest.skip("no producer library is installed")
    run = subprocess.run([sys.executable, "-m", "dlpack", "check", "--json", *specs],
                         capture_output=True, text=True, timeout=300)
    data = json.loads(run.stdout)
    assert run.returncode == data["exit_status"]
    for report in data["reports"]:
        # every rule, for DLPack producers, Arrow producers and producers of both
        assert [r["rule"] for r in report["results"]] == RULES, report
        assert {r["status"] for r in report["results"]} <= {"pass", "fail", "n/a"}
        assert all(r["evidence"] for r in report["results"])


def test_child_runner_survives_a_crash_and_stops_a_silent_child():
    """tools._child, the runner of check_isolated and of the hostile corpus: lines come as
    written, a segfault is an exit status, a child silent past its timeout is killed."""
    from dlpack.tools._child import Child

    crash = "print('one', flush=True); import ctypes; ctypes.string_at(0)"
    with Child(["-c", crash], crash_env(), 60) as child:
        assert list(child.lines()) == ["one\n"]
        assert child.finish() < 0 and not child.timed_out
    with Child(["-c", "import time; print('up', flush=True); time.sleep(60)"], os.environ,
               1) as child:
        assert list(child.lines()) == ["up\n"]
        assert child.timed_out and child.finish() < 0
