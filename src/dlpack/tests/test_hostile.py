"""Run the hostile corpus (``hostile.py``, docs/spec.md §7) and judge every case.

Each group runs in its own child interpreter (``dlpack.tools._child``, the checker's runner;
one silent for TIMEOUT seconds is stopped), so a crash (segfault, abort, a sanitizer report)
cannot take the test run down: it fails the case that was running, named by the child's last
``START`` line, and the rest of the group resumes in a fresh child. The child inherits the
environment, so under the sanitizer job (``.ci/sanitize.sh``) the children are checked too.
"""

from __future__ import annotations

import json
import os
from functools import cache

import pytest

from dlpack.tests import hostile
from dlpack.tools._child import Child

# Cases whose modules are importable here, decided once in the parent: absent ones skip.
CASES = list(hostile.CASES.values())
TIMEOUT = 120


@cache
def run_group(group: str) -> dict[str, dict]:
    """Outcomes of a group's cases: each child's RESULT, or a crash record for the case running.

    After a crash the group goes on in a new child from the case after the crashed one.
    """
    names = [c.name for c in CASES if c.group == group and hostile.available(c)]
    outcomes: dict[str, dict] = {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(hostile.__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    while len(outcomes) < len(names):
        first = next(n for n in names if n not in outcomes)
        with Child(["-m", "dlpack.tests.hostile", group, first], env, TIMEOUT) as child:
            running = None
            for line in child.lines():
                if line.startswith("START "):
                    running = line[6:].rstrip("\n")
                elif line.startswith("RESULT "):
                    result = json.loads(line[7:])
                    outcomes[result["case"]] = result
                    running = None
            rc = child.finish()
            err = child.log() + (f"\nsilent for {TIMEOUT} s: stopped" if child.timed_out else "")
        if rc != 0 or running is not None:
            crashed = running or first
            outcomes[crashed] = {"case": crashed, "crash": rc, "stderr": err[-4000:]}
        elif len(outcomes) < len(names):        # the child ended early without crashing
            for n in names:
                outcomes.setdefault(n, {"case": n, "crash": rc, "stderr": err[-4000:]})
    return outcomes


def check(case: hostile.Case, got: dict) -> None:
    """Assert one outcome against the case's expectation."""
    if "crash" in got:
        pytest.fail(f"{case.name} crashed the child (exit {got['crash']}):\n{got['stderr']}")
    expect = case.expect
    if isinstance(expect, hostile.Raises):
        assert "exc" in got, f"{case.name}: expected {expect.types}, got value {got.get('value')!r}"
        assert set(got["exc"]) & set(expect.types), f"{case.name}: {got['exc'][0]}: {got['msg']}"
        msg = got["msg"]
        for word in expect.words:
            options = word if isinstance(word, tuple) else (word,)
            assert any(o in msg for o in options), f"{case.name}: {options} not in {msg!r}"
        for leak in hostile.LEAKS:
            assert leak not in msg, f"{case.name}: leaked internal text {leak!r}: {msg!r}"
    else:
        assert "exc" not in got, f"{case.name}: {got.get('exc', [''])[0]}: {got.get('msg')}"
        assert got["value"] == json.loads(json.dumps(expect.value, default=repr)), case.name
    if expect.after is not None:
        assert got.get("after") == json.loads(json.dumps(expect.after, default=repr)), (
            f"{case.name}: after hook gave {got.get('after')!r}")


def test_corpus_size() -> None:
    """Spec §7's hostile input is tried broadly: at least 200 cases."""
    assert len(CASES) >= 200


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile(case: hostile.Case) -> None:
    if not hostile.available(case):
        pytest.skip(f"needs {', '.join(case.needs)}")
    check(case, run_group(case.group)[case.name])
