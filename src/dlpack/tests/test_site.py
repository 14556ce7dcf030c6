"""The docs site (mkdocs.yml, .ci/mkdocs_hooks.py): it builds with warnings as errors, its API
reference names exactly ``dlpack.__all__``, and every page of docs/guide/ is in its nav and in
the guide's index (spec §1: the docs are output). Skips without MkDocs (.ci/requirements-docs.txt)
or without the checkout (found as test_docs finds it). ``PYDLPACK_SITE`` names a site CI built
already (mkdocs build --strict), which is then read instead of building another."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dlpack
from dlpack.tests.test_docs import ROOT

pytest.importorskip("mkdocs", reason="mkdocs is not installed (.ci/requirements-docs.txt)")
if not (ROOT / "mkdocs.yml").is_file():
    pytest.skip("no docs here: pydlpack installed without its checkout", allow_module_level=True)

GUIDE = sorted(p.name for p in (ROOT / "docs" / "guide").glob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    built = os.environ.get("PYDLPACK_SITE")
    if built:
        return Path(built)
    out = tmp_path_factory.mktemp("site")
    # The hook reads the docstrings of the dlpack this test runs on.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(dlpack.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
                          str(ROOT / "mkdocs.yml"), "-d", str(out)],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_the_api_reference_names_every_public_name_and_only_them(site):
    page = (site / "api.html").read_text()
    names = [html.unescape(re.sub(r"<[^>]+>", "", h)).rstrip("¶").strip()
             for h in re.findall(r"<h2 id=[^>]*>(.*?)</h2>", page, re.S)]
    assert names == list(dlpack.__all__)


def test_the_api_reference_gives_each_its_signature_and_docstring(site):
    page = html.unescape((site / "api.html").read_text())
    sections = re.split(r"<h2 id=", page)[1:]
    for name, section in zip(dlpack.__all__, sections, strict=True):
        assert re.search(rf"<code>(class )?{re.escape(name)}\b", section), name
        assert re.search(r"<p>(?!<code>)\S", section), f"{name} has no description"
    asdlpack = sections[list(dlpack.__all__).index("asdlpack")]
    assert "allow_legacy_readonly: bool=False" in asdlpack


def test_every_guide_page_is_in_the_nav_and_the_index(site):
    front = (site / "index.html").read_text()
    for name in GUIDE:
        target = "guide/index.html" if name == "README.md" else f"guide/{name[:-3]}.html"
        assert (site / target).is_file() and f'href="{target}"' in front, name
    index = (ROOT / "docs" / "guide" / "README.md").read_text()
    unlisted = [n for n in GUIDE if n != "README.md" and f"]({n})" not in index]
    assert not unlisted, f"docs/guide/README.md's table lacks {unlisted}"


def test_the_readme_is_the_front_page_with_its_links_resolved(site):
    front = (site / "index.html").read_text()
    assert "<h1 id=\"pydlpack\">pydlpack" in front
    for target in ("spec.html", "guide/index.html", "migration.html", "changelog.html",
                   "benchmarks.html", "check.html", "matrix.html"):
        assert f'href="{target}"' in front, target
