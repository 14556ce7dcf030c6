"""The suite's own conftest: skipped tests say why (spec §2), however pytest is run."""

import subprocess
import sys


def test_skip_reasons_are_printed(tmp_path):
    """As with the README's --pyargs command, the conftest is found while collecting, after
    the terminal reporter has read its options."""
    sub = tmp_path / "suite"
    sub.mkdir()
    (sub / "conftest.py").write_text("from dlpack.tests.conftest import pytest_configure\n")
    (sub / "test_skips.py").write_text("import pytest\n\n\ndef test_needs_a_library():\n"
                                       "    pytest.skip('libfoo is not installed')\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert "1 skipped" in run.stdout, run.stdout + run.stderr
    assert "libfoo is not installed" in run.stdout, run.stdout
