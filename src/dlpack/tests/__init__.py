"""pydlpack's test suite, shipped with the package: ``dlpack.tests.run()`` runs it."""

from __future__ import annotations

import os


def run(*args: str) -> int:
    """Run the suite with pytest on what is installed; tests of missing libraries skip."""
    try:
        import pytest
    except ImportError:
        raise ModuleNotFoundError(
            "dlpack.tests.run() needs pytest: pip install 'pydlpack[test]' (pytest and "
            "hypothesis); the array libraries it exchanges data with are optional") from None
    return pytest.main([os.path.dirname(__file__), "-q", "-p", "no:cacheprovider", *args])
