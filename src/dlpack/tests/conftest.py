"""Fixtures shared by the suite."""

import gc
import os

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


def _fake_driver(stream_ordered):
    from dlpack.tests import fake_cuda

    driver = fake_cuda.install(stream_ordered)
    yield driver
    fake_cuda.uninstall()
    assert driver.touched() == [], "a host read path read device memory"
    assert driver.gil_held == [], f"blocking driver calls made with the GIL held: {driver.gil_held}"
    assert driver.undefined == [], f"calls libcuda leaves undefined: {driver.undefined}"


@pytest.fixture
def fake():
    """The fake CUDA driver, installed in the core for one test; afterwards no host read has
    touched device memory and no blocking driver call was made with the GIL held."""
    yield from _fake_driver(True)


@pytest.fixture
def fake_sync():
    """The fake driver without stream-ordered allocation (a driver before CUDA 11.2)."""
    yield from _fake_driver(False)


@pytest.hookimpl(trylast=True)        # after the terminal reporter exists
@pytest.fixture(scope="module")
def child_path():
    """Spawned children (multiprocessing, Dask and Ray workers) import the dlpack under test."""
    import dlpack

    here = os.path.dirname(os.path.dirname(os.path.abspath(dlpack.__file__)))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, old) if p)
    yield
    if old is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = old


def pytest_configure(config):
    """Print why each skipped test skipped (a missing library, no GPU), however pytest is run:
    the README's command, dlpack.tests.run(), CI. The terminal reporter read -r already, so
    its own copy is the one to extend."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and "s" not in reporter.reportchars:
        reporter.reportchars += "s"


def pytest_collection_finish(session):
    """Name pytest-randomly's seed even under -q, so a failing order can be replayed."""
    seed = getattr(session.config.option, "randomly_seed", None)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if seed is not None and reporter is not None:
        reporter.write_line(f"test order shuffled by pytest-randomly; replay it with "
                            f"-p randomly --randomly-seed={seed}")
