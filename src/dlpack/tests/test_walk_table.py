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
