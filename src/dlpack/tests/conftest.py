"""Fixtures shared by the suite."""

import gc

import pytest

from dlpack.tests.helpers import rss_kib


@pytest.fixture
def no_leak():
    """Fail if resident memory grows by more than 20 MiB over the test body."""
    gc.collect()
    before = rss_kib()
    yield
    gc.collect()
    grown = rss_kib() - before
    assert grown < 20 * 1024, f"resident memory grew by {grown} KiB"
