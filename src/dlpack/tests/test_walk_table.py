"""The protocol walk's table (_walk.pxi's _STEPS) is docs/spec.md §3's table, row for row: the
spec states the order the code asks. Runs from a checkout (reads the sources)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1]
SPEC = SRC.parents[1] / "docs" / "spec.md"

pytestmark = pytest.mark.skipif(not SPEC.exists() or not (SRC / "_walk.pxi").exists(),
                                reason="needs a checkout (docs/spec.md, the .pxi files)")


def walk_steps() -> list[str]:
    return re.findall(r'^_step\("([^"]+)"', (SRC / "_walk.pxi").read_text(), re.M)


def spec_steps() -> list[str]:
    section = SPEC.read_text().split("## §3 ", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)`", section, re.M)


def test_the_spec_states_the_walks_order():
    steps = walk_steps()
    assert steps[0] == "DLPack capsule" and steps[-1] == "ctypes pointer"
    assert spec_steps() == steps


def test_the_error_for_no_protocol_lists_the_table():
    """The TypeError for an object that speaks none lists the table's protocols in its order
    (from the table itself: a new row cannot be left out of the message)."""
    from dlpack import asdlpack

    with pytest.raises(TypeError) as e:
        asdlpack({1: 2})
    steps = list(dict.fromkeys(walk_steps()))
    assert f"(none of {', '.join(steps[:-1])} or {steps[-1]})" in str(e.value)
