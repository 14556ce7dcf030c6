"""`python -m dlpack check --consumer` (spec §12): broken consumers each fail by their rule,
crashes included; real consumers' stable results pinned; JSON and exit statuses."""

import json
import os
import struct
import subprocess
import sys

import pytest

from dlpack.tests import broken_consumers
from dlpack.tests.broken_consumers import EXPECTED
from dlpack.tests.test_check import crash_env
from dlpack.tools.check_consumer import SUITE, Consumer, Layout, Probe, seen

RULES = SUITE.rules

BROKEN = "dlpack.tests.broken_consumers:"


def verdicts(consume):
    s = Consumer(consume)
    return {name: SUITE.grade(s, name) for name in RULES}


def failed(results):
    return [name for name, r in results.items() if r.status == "fail"]


def run_check(*args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "dlpack", "check", *args],
                          capture_output=True, text=True, timeout=timeout, env=env or crash_env())


def test_correct_consumer_passes_every_rule():
    got = verdicts(broken_consumers.correct)
    assert failed(got) == [], got
    assert got["exchange-api"].status == "n/a"


# in this process: neither the one that crashes nor the one that writes into every pipe
@pytest.mark.parametrize("name", [n for n in EXPECTED
                                  if n not in ("null_strides_segfault", "forges_a_pass")])
def test_broken_consumer_fails_by_its_rule_only(name):
    got = verdicts(getattr(broken_consumers, name))
    assert failed(got) == [EXPECTED[name]], got


def test_early_deleter_is_caught_by_the_pattern():
    """The deleter overwrites the data; the dangling array shows it."""
    got = verdicts(broken_consumers.deletes_early)["deleter-once"]
    assert "reads the pattern the deleter wrote" in got.evidence


def test_probe_layouts_read_back_as_expected():
    """The checker's own probes: asdlpack reads each strides case as the layout says."""
    from dlpack import asdlpack
    from dlpack.tools.check_consumer import _STRIDES, _compare

    for name, layout in _STRIDES.items():
        probe = Probe(layout)
        assert _compare(seen(asdlpack(probe)), layout, probe)[0] == "ok", name
    assert Layout(shape=(6,), strides=(-1,), offset=20).expected() == \
        struct.pack("<6f", 5, 4, 3, 2, 1, 0)


def test_cli_grades_every_broken_consumer_and_survives_the_crash():
    """One run: exit 1, valid JSON, each broken consumer failed by exactly its rule; the
    segfaulting one fails strides naming the signal and the frame, and the rules after it run."""
    specs = [BROKEN + "correct", *(BROKEN + n for n in EXPECTED)]
    done = run_check("--consumer", "--json", *specs)
    assert done.returncode == 1, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert data["exit_status"] == 1 and data["schema"] == "pydlpack-check/1"
    assert [r["consumer"] for r in data["reports"]] == specs
    for report in data["reports"]:
        assert [r["rule"] for r in report["results"]] == RULES
        assert all(set(r) == {"rule", "status", "evidence", "allowed"} and r["status"] in
                   ("pass", "fail", "n/a") and r["allowed"] is False for r in report["results"])
        name = report["consumer"].rpartition(":")[2]
        assert [r["rule"] for r in report["results"] if r["status"] == "fail"] == \
            ([EXPECTED[name]] if name in EXPECTED else []), report
    crash = {r["rule"]: r for r in data["reports"][specs.index(
        BROKEN + "null_strides_segfault")]["results"]}["strides"]
    assert "signal 11 (SIGSEGV), trying legacy NULL" in crash["evidence"]
    assert "broken_consumers.py" in crash["evidence"]


def test_a_forged_verdict_fails_the_running_rule():
    """§12: a consumer that writes a well-formed result into the pipes it holds (the checker's
    channel among them) gets no line reported: the worker's lines carry a key the consumer is
    not given, so the foreign line fails the rule that was running, each rule reported once."""
    done = run_check("--consumer", "--json", BROKEN + "forges_a_pass")
    assert done.returncode == 1, done.stderr[-2000:]
    results = json.loads(done.stdout)["reports"][0]["results"]
    assert [r["rule"] for r in results] == RULES
    got = {r["rule"]: r for r in results}
    assert got["read-only"]["status"] == "fail"
    assert "wrote into the checker's result channel" in got["read-only"]["evidence"]
    assert got["exchange-api"]["status"] == "n/a" and "forged" not in got["byte-offset"]["evidence"]


def test_a_hostile_refusal_is_a_refusal():
    """A BufferError subclass whose metaclass makes __name__ raise, with a 4 MB str(), refuses
    as BufferError("no") does (decided by its class alone); the evidence names it, bounded."""
    got = verdicts(broken_consumers.hostile_refusals)
    assert failed(got) == ["byte-offset"], got
    assert "refused (HostileRefusal)" in got["byte-offset"].evidence
    assert got["device"].status == "pass" and "more characters)" in got["device"].evidence
    for r in got.values():
        assert "no name" not in r.evidence and len(r.evidence) <= 540, r


class _Proxy:
    """Exports by asking the producer it wraps: nothing was imported."""

    def __init__(self, producer):
        self.producer = producer

    def __dlpack__(self, **kwargs):
        return self.producer.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.producer.__dlpack_device__()


@pytest.mark.parametrize("consume, why", [
    (broken_consumers.returns_the_producer, "the producer itself"),
    (lambda p: (p.__dlpack__(max_version=(1, 3)), p)[1], "the producer itself"),
    (_Proxy, "asking the producer again"),
    (lambda p: __import__("array").array("f", range(6)), "without calling __dlpack__"),
], ids=["itself", "called", "proxy", "own-array"])
def test_a_consumer_that_imports_nothing_fails_basic_import(consume, why):
    """The checker reads back only what the consumer imported: a consumer that never called
    __dlpack__, or hands back the producer (or a proxy of it), fails basic-import and the
    other rules are n/a (before, the checker's own asdlpack read the probe and they passed)."""
    got = verdicts(consume)
    assert failed(got) == ["basic-import"] and why in got["basic-import"].evidence, got
    assert {r.status for name, r in got.items() if name != "basic-import"} == {"n/a"}


def test_allow_fail_gates_on_the_rules_a_consumer_meets():
    """--allow-fail RULE: its failure is reported, marked allowed (text and JSON), and exit
    status 0 when only allowed rules fail; 1 when another fails."""
    done = run_check("--consumer", "--json", "--allow-fail", "read-only",
                     BROKEN + "ignores_readonly", BROKEN + "correct")
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert data["exit_status"] == 0 and data["allow_fail"] == ["read-only"]
    flagged = [(rep["consumer"], r["rule"]) for rep in data["reports"] for r in rep["results"]
               if r["allowed"]]
    assert flagged == [(BROKEN + "ignores_readonly", "read-only")]
    text = run_check("--consumer", "--allow-fail", "read-only", "--allow-fail", "hostile",
                     BROKEN + "ignores_readonly", BROKEN + "ignores_byte_offset",
                     env=crash_env(COLUMNS="100"))
    assert text.returncode == 1, text.stderr[-2000:]
    lines = text.stdout.splitlines()
    assert "  1 rule failed, allowed by --allow-fail" in lines and lines[-1] == "  1 rule failed"
    assert any(line.startswith("  fail  read-only") and "(allowed failure, --allow-fail)" in line
               for line in lines)


def test_exit_status_0_and_text_output():
    done = run_check("--consumer", BROKEN + "correct")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"python -m dlpack check --consumer {BROKEN}correct"
    assert lines[-1] == "  every rule passed or does not apply"
    assert all(len(line) <= 80 for line in lines)


def test_a_consumer_that_forks_is_graded_once():
    """A fork of the worker that returns from the consumer ends there (before: it graded the
    next cases, forking again, and the run never finished)."""
    done = run_check("--consumer", "--json", BROKEN + "forks_on_each_call", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["reports"][0]["results"]
    assert [r["rule"] for r in results] == RULES
    assert all(r["status"] != "fail" for r in results), results


def test_json_stays_json_when_the_consumers_module_prints(tmp_path):
    """What a consumer's module prints as it is imported, through Python or straight to file
    descriptor 1, stays out of the JSON (the parent imported it to find usage errors)."""
    (tmp_path / "noisy_consumer.py").write_text(
        "import os\nprint('hello')\nos.write(1, b'raw\\n')\n"
        "from dlpack.tests.broken_consumers import correct\n")
    done = run_check("--consumer", "--json", "noisy_consumer:correct",
                     env=crash_env(PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path])))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["exit_status"] == 0


@pytest.mark.parametrize("body", ["import os\nos._exit(7)\n",
                                  "import ctypes\nctypes.string_at(0)\n"], ids=["exit", "segv"])
def test_a_consumer_module_that_dies_on_import_is_graded(tmp_path, body):
    """A module that exits or crashes as it is imported fails the load rule, in JSON (the parent
    used to import it to find usage errors, and died with it)."""
    (tmp_path / "dies_on_import.py").write_text(body)
    done = run_check("--consumer", "--json", "dies_on_import:f",
                     env=crash_env(PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path])))
    assert done.returncode == 1, done.stderr[-2000:]
    [result] = json.loads(done.stdout)["reports"][0]["results"]
    assert result["status"] == "fail" and "ended the checker's child process" in result["evidence"]


@pytest.mark.parametrize("spec", ["numpy", "dlpack.no_such_module:f", "dlpack:no_such_name"])
def test_usage_errors_exit_2(spec):
    done = run_check("--consumer", "--json", spec)
    assert done.returncode == 2
    assert json.loads(done.stdout.splitlines()[0])["exit_status"] == 2
    if "module" in spec:
        assert "on PYTHONPATH?" in done.stderr, done.stderr


def test_real_consumers_pinned():
    """Stable upstream results (docs/check.md explains each failure)."""
    pytest.importorskip("numpy")
    pytest.importorskip("torch")
    done = run_check("--consumer", "--json", "numpy:from_dlpack", "dlpack:asdlpack",
                     "torch:from_dlpack")
    data = json.loads(done.stdout)
    got = {r["consumer"]: {x["rule"]: x["status"] for x in r["results"]}
           for r in data["reports"]}
    fails = {spec: sorted(k for k, v in rules.items() if v == "fail")
             for spec, rules in got.items()}
    assert fails == {"numpy:from_dlpack": ["hostile"], "dlpack:asdlpack": [],
                     "torch:from_dlpack": ["hostile", "read-only", "strides"]}
    assert got["dlpack:asdlpack"]["exchange-api"] == "pass"
    assert got["numpy:from_dlpack"]["exchange-api"] == "n/a"
    assert done.returncode == 1


def test_help_lists_the_consumer_rules():
    done = run_check("--help", env=crash_env(COLUMNS="80"))
    assert done.returncode == 0 and "--consumer" in done.stdout
    for name in RULES:
        assert f"  {name} " in done.stdout, name
    assert max(len(line) for line in done.stdout.splitlines()) <= 80


def test_in_process_grading_exits_cleanly():
    """Probes outliving the rules (arrays, capsules freed at interpreter exit) still find
    their deleters and destructors: the interpreter exits with status 0."""
    code = ("from dlpack.tests import broken_consumers as b\n"
            "from dlpack.tools.check_consumer import SUITE, Consumer\n"
            "s = Consumer(b.correct)\n"
            "print([SUITE.grade(s, name).status for name in SUITE.rules].count('fail'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=crash_env())
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr[-2000:]
