"""The matrix as a page (``--html``) and its reasons said once (docs/spec.md §9): the page is a
well-formed, self-contained view of the JSON dict, and the text groups a reason's cells by rows
and columns."""

import json
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import asdict
from html.parser import HTMLParser

import pytest

from dlpack.tests.helpers import lib
from dlpack.tools import matrix, matrix_cases, matrix_text
from dlpack.tools.matrix_html import render_html
from dlpack.tools.matrix_reasons import grouped_places

ROW = "provider A copies: every export is new memory"
COLUMN = "consumer Z has no float32"
SINGLE = "B → X int8: one odd cell"
HOSTILE = 'a <script>alert("x")</script> & <b>bold</b> reason'


def synthetic(extra: tuple = ()) -> dict:
    """A matrix where one reason holds for a whole row (A → every consumer), one for a whole
    column (every provider of float32 → Z) and one for a single cell (B → X int8); ``extra``
    cells replace the ones with their provider, consumer and dtype."""
    providers, consumers = ["A", "B", "C"], ["X", "Y", "Z"]
    makes = {"A": ["int8"], "B": ["int8", "float32"], "C": ["int8", "float32"]}
    cells = []
    for p in providers:
        for c in consumers:
            for d in makes[p]:
                if p == "A":
                    cell = matrix_cases.Cell(p, c, d, "copy", ROW)
                elif c == "Z" and d == "float32":
                    cell = matrix_cases.Cell(p, c, d, "fail", COLUMN)
                elif (p, c, d) == ("B", "X", "int8"):
                    cell = matrix_cases.Cell(p, c, d, "unverified", SINGLE)
                else:
                    cell = matrix_cases.Cell(p, c, d, "ok")
                cells.append(cell)
    replaced = {(c.provider, c.consumer, c.dtype): c for c in extra}
    cells = [replaced.get((c.provider, c.consumer, c.dtype), c) for c in cells]
    return {
        "schema": matrix.SCHEMA,
        "header": {"pydlpack": "9.9", "python": "3.11.7", "implementation": "CPython",
                   "platform": "Linux-test", "machine": "x86_64", "device": "cuda",
                   "libraries": {"numpy": "2.4.6", "liba": "1.0"},
                   "cuda": {"driver": "12.4", "gpus": ["Test GPU"]}},
        "providers": providers, "consumers": consumers, "dtypes": ["int8", "float32"],
        "unavailable": [{"role": "provider", "name": "D", "reason": "not installed (no D)"}],
        "pairs": matrix._pairs(cells, providers, consumers),
        "cells": [asdict(c) for c in cells],
        "not_run": [{"provider": "C", "consumer": "Y", "dtype": "bfloat16",
                     "library": "ml_dtypes"}],
        "exit_status": 0,
    }


def test_grouped_text_says_each_reason_once_by_row_column_and_cell():
    result = synthetic()
    text = matrix_text.render_text(result, width=100)
    flat = " ".join(text.split())
    for reason in (ROW, COLUMN, SINGLE):
        assert flat.count(reason) == 1, reason
    assert "in: A → every consumer (int8)" in flat             # the whole row
    assert "in: every provider of float32 → Z" in flat          # the whole column
    assert "in: B → X (int8)" in flat                           # the single cell
    verbose = " ".join(matrix_text.render_text(result, width=100, verbose=True).split())
    assert "in: A → X (int8); A → Y (int8); A → Z (int8)" in verbose
    assert "in: B → Z (float32); C → Z (float32)" in verbose
    assert len(verbose) > len(flat)
    md = matrix_text.render_markdown(result)
    assert f"{ROW} — in: A → every consumer (int8)" in md
    assert "B → Z (float32)" in matrix_text.render_markdown(result, verbose=True)


def test_grouped_places_merge_providers_and_every_dtype():
    result = synthetic()
    same = [c for c in result["cells"] if c["consumer"] == "Y" and c["provider"] != "A"]
    assert grouped_places(result, same) == ["B, C → Y (every dtype they make)"]
    one = [c for c in same if c["provider"] == "C"]
    assert grouped_places(result, one) == ["C → Y (every dtype it makes)"]
    part = [c for c in same if c["provider"] == "C" or c["dtype"] == "int8"]
    assert grouped_places(result, part) == ["B → Y (int8)", "C → Y (every dtype it makes)"]
    everywhere = [c for c in result["cells"] if c["dtype"] == "int8"]
    assert grouped_places(result, everywhere) == ["every provider of int8 → every consumer"]


def expand(result: dict, phrase: str) -> set[tuple[str, str, str]]:
    """The cells one phrase of ``grouped_places`` names, read back by its definition."""
    made: dict[str, list[str]] = {}
    have = set()
    for c in result["cells"]:
        made.setdefault(c["provider"], []).append(c["dtype"])
        have.add((c["provider"], c["consumer"], c["dtype"]))
    left, right = phrase.split(" → ")
    dtypes = None
    if right.endswith(")"):
        right, _, listed = right[:-1].partition(" (")
        dtypes = None if listed.startswith("every dtype") else listed.split(", ")
    consumers = result["consumers"] if right == "every consumer" else right.split(", ")
    if left.startswith("every provider of "):
        dtypes = left.removeprefix("every provider of ").split(", ")
        providers = [p for p in result["providers"]
                     if all((p, c, d) in have for c in consumers for d in dtypes)]
    else:
        providers = left.split(", ")
    return {(p, c, d) for p in providers for c in consumers
            for d in (dtypes if dtypes is not None else made[p])}


def test_grouped_places_name_every_cell_once():
    """On random matrices and random subsets of their cells (hypothesis): the phrases, read
    back, are exactly the subset, and no cell is in two of them."""
    hypothesis = lib("hypothesis")
    st = hypothesis.strategies
    names = st.lists(st.sampled_from("ABCDE"), min_size=1, max_size=4, unique=True)

    @hypothesis.settings(deadline=None, max_examples=300)
    @hypothesis.given(names, st.lists(st.sampled_from("VWXYZ"), min_size=1, max_size=4,
                                      unique=True), st.data())
    def check(providers, consumers, data):
        dtypes = ["int8", "float32", "bool"]
        cells = []
        for p in providers:
            makes = data.draw(st.lists(st.sampled_from(dtypes), min_size=1, unique=True))
            cells += [{"provider": p, "consumer": c, "dtype": d} for c in consumers
                      for d in dtypes if d in makes]
        result = {"providers": providers, "consumers": consumers, "dtypes": dtypes,
                  "cells": cells}
        subset = [c for c in cells if data.draw(st.booleans())]
        phrases = grouped_places(result, subset)
        named = [expand(result, phrase) for phrase in phrases]
        assert set().union(*named) == {(c["provider"], c["consumer"], c["dtype"])
                                       for c in subset}, phrases
        assert sum(map(len, named)) == len(subset), phrases

    check()


class Page(HTMLParser):
    """The page's tags checked as they come (every element closed, in order) and its cells
    read back: (provider, consumer, dtype) -> (status, reason) from what the reader sees."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source"})

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.styles: list[str] = []
        self.doctype = ""
        self.cells: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.summaries: dict[tuple[str, str], tuple[str, str]] = {}
        self._td: dict | None = None
        self._li: dict | None = None
        self._span = ""
        self._summary: list[str] | None = None
        self.feed(page)
        self.close()

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag == "td" and "data-provider" in a:
            self._td = a
        elif tag == "summary" and self._td:
            self._summary = []
        elif tag == "li" and self._td and "data-status" in a:
            self._li = {"status": a["data-status"], "dtypes": "", "why": ""}
        elif tag == "span" and self._li is not None:
            self._span = a.get("class", "")

    def handle_startendtag(self, tag, attrs):
        assert tag in self.VOID, f"<{tag}/> is not an HTML void element"
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()
        if tag == "span":
            self._span = ""
        elif tag == "summary" and self._summary is not None:
            p, c = self._td["data-provider"], self._td["data-consumer"]
            self.summaries[p, c] = (self._td["class"], "".join(self._summary))
            self._summary = None
        elif tag == "li" and self._li is not None:
            p, c = self._td["data-provider"], self._td["data-consumer"]
            for d in self._li["dtypes"].split(", "):
                assert (p, c, d) not in self.cells, (p, c, d)
                self.cells[p, c, d] = (self._li["status"], self._li["why"])
            self._li = None
        elif tag == "td":
            self._td = None

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "style":
            self.styles.append(data)
        if self._summary is not None:
            self._summary.append(data)
        if self._li is not None and self._span in ("dtypes", "why"):
            self._li[self._span] += data


def check_page(page: str, result: dict) -> Page:
    """Well-formed, self-contained, and every cell of ``result`` in it with its status and
    reason (and nothing else); each pair's verdict by class (colour) and by mark."""
    parsed = Page(page)
    assert parsed.doctype.lower() == "doctype html"
    assert parsed.stack == [], parsed.stack                      # every element closed
    assert parsed.tags[0][0] == "html"
    for tag, attrs in parsed.tags:                               # nothing outside the page
        assert tag not in ("script", "link", "img", "iframe", "object", "embed", "base"), tag
        for name, value in attrs.items():
            assert name not in ("src", "href", "srcset", "action", "style"), (tag, name)
            assert "http:" not in (value or "") and "https:" not in (value or "")
    css = "".join(parsed.styles)
    for word in ("url(", "@import", "http:", "https:", "@font-face"):
        assert word not in css, word
    expected = {(c["provider"], c["consumer"], c["dtype"]): (c["status"], matrix_text.explained(c))
                for c in result["cells"]}
    assert parsed.cells == expected
    for pair in result["pairs"]:
        cls, summary = parsed.summaries[pair["provider"], pair["consumer"]]
        assert cls == f"v-{pair['verdict']}"
        assert summary.split()[0] == matrix_cases.PAIR_SYMBOLS[pair["verdict"]]
        assert summary.split()[1].endswith(f"/{pair['held']}")
    return parsed


def test_synthetic_page_holds_every_cell_and_the_header():
    result = synthetic()
    page = render_html(result)
    check_page(page, result)
    text = " ".join(visible_text(page).split())
    assert "pydlpack 9.9" in text and "numpy 2.4.6, liba 1.0" in text
    assert "CUDA driver 12.4 · GPU Test GPU" in text
    assert "not run: providers D — not installed (no D)" in text
    assert "pip install ml_dtypes runs them" in text
    for reason in (ROW, COLUMN, SINGLE):                         # the reasons, once each
        assert text.count(f"{reason} — in:") == 1
    assert "A → every consumer (int8)" in text
    for status in matrix_cases.STATUSES:                         # mark beside colour
        assert f"{matrix_cases.SYMBOLS[status]} {status}:" in text


def test_unsupported_dtypes_count_apart_on_the_page():
    """A pair whose only non-✓ dtypes are unsupported keeps its ✓ over the dtypes both sides
    hold, the unsupported ones counted apart; a pair with nothing both hold is – 0/0."""
    control = {"side": "consumer", "via": "numpy → Z", "outcome": "refused",
               "reason": "TypeError: Z has no float32"}
    mine = dict(control, side="provider", via="A's own __dlpack__")
    extra = (*(matrix_cases.Cell(p, "Z", "float32", "unsupported", COLUMN, "", control)
               for p in "BC"),
             matrix_cases.Cell("A", "Y", "int8", "unsupported", ROW, "", mine))
    result = synthetic(extra=extra)
    pairs = {(x["provider"], x["consumer"]): x for x in result["pairs"]}
    assert pairs["C", "Z"]["verdict"] == "ok" and pairs["C", "Z"]["held"] == 1
    assert pairs["A", "Y"]["verdict"] == "unsupported" and pairs["A", "Y"]["held"] == 0
    page = render_html(result)
    parsed = check_page(page, result)
    assert parsed.summaries["C", "Z"] == ("v-ok", "✓ 1/1 1 –")
    assert parsed.summaries["A", "Y"] == ("v-unsupported", "– 0/0 1 –")
    text = " ".join(visible_text(page).split())
    assert "without pydlpack too, numpy → Z: TypeError: Z has no float32" in text
    assert "2 – unsupported, 1 ✗ fail" not in text and "3 – unsupported, 0 ✗ fail" in text


def visible_text(page: str) -> str:
    """What a reader sees of the page (its text, without the style sheet)."""
    out: list[str] = []

    class Text(HTMLParser):
        skip = False

        def handle_starttag(self, tag, attrs):
            self.skip = tag == "style"

        def handle_endtag(self, tag):
            self.skip = False

        def handle_data(self, data):
            if not self.skip:
                out.append(data)

    Text().feed(page)
    return " ".join(out)


def test_hostile_reason_is_text_not_markup():
    bad = matrix_cases.Cell("C", "X", "float32", "fail", HOSTILE, "note & <i>")
    result = synthetic(extra=(bad,))
    result["header"]["platform"] = "<em>Linux</em>"
    page = render_html(result)
    parsed = check_page(page, result)
    assert parsed.cells["C", "X", "float32"] == ("fail", f"{HOSTILE}; note & <i>")
    assert "<script>" not in page and "<em>" not in page
    assert "<em>Linux</em>" in visible_text(page)


@pytest.fixture(scope="module")
def real():
    lib("numpy")
    lib("torch")
    return matrix.build(providers=["numpy", "bytes", "torch"],
                        consumers=["torch", "numpy", "memoryview"],
                        dtypes=["float32", "uint8", "bfloat16"])


def test_real_run_page(real):
    check_page(render_html(real), real)
    shown = [c for c in real["cells"] if c["status"] in ("fail", "unsupported")]
    assert shown                                                 # reasons shown, not only ✓
    text = " ".join(visible_text(render_html(real)).split())
    assert all(" ".join(c["control"]["reason"].split()) in text for c in shown)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "dlpack", *args], capture_output=True,
                          text=True, timeout=300)


def test_cli_page_is_the_json_run_viewed(tmp_path):
    """--html FILE and --html - write render_html of what --json prints for the same run."""
    lib("numpy")
    filters = ("--provider", "bytes,numpy", "--consumer", "numpy,memoryview",
               "--dtype", "uint8,float16")
    path = tmp_path / "matrix.html"
    run = run_cli(*filters, "--html", str(path))
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and str(path) in run.stderr
    data = json.loads(run_cli(*filters, "--json").stdout)
    assert path.read_text(encoding="utf-8") == render_html(data)
    check_page(path.read_text(encoding="utf-8"), data)
    out = run_cli(*filters, "--html", "-")
    assert out.returncode == 0 and out.stdout == render_html(data)


def test_cli_html_usage_errors(tmp_path):
    run = run_cli("--html", str(tmp_path / "missing" / "m.html"))
    assert run.returncode == 2 and "does not exist" in " ".join(run.stderr.split())
    run = run_cli("--html", str(tmp_path), "--provider", "bytes")
    assert run.returncode == 2 and "it is a folder" in " ".join(run.stderr.split())
    run = run_cli("--html", "-", "--json")
    assert run.returncode == 2 and json.loads(run.stdout)["exit_status"] == 2
    run = run_cli("--html", "-", "--markdown")
    assert run.returncode == 2 and "not allowed with argument --markdown" in run.stderr
    run = run_cli("--html", "", "--provider", "bytes")     # no FILE: not the text report
    assert run.returncode == 2 and "name the page's FILE" in run.stderr and run.stdout == ""
    run = run_cli("--html", "", "--json")
    assert run.returncode == 2 and json.loads(run.stdout)["exit_status"] == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_cli_html_write_failure_after_the_run_is_a_usage_error():
    """A FILE that passes the check before the run but cannot take the page (a full disk;
    /dev/full) exits 2 naming the file and the OS's reason, not the run's status (spec §9)."""
    run = run_cli("--html", "/dev/full", "--provider", "bytes", "--consumer", "memoryview",
                  "--dtype", "uint8")
    text = " ".join(run.stderr.split())
    assert run.returncode == 2 and "'/dev/full': cannot write the page" in text, text
    assert "No space left" in text and "wrote" not in text


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless Chromium here (Debian: apt-get install chromium); the page's "
                "structure is checked without it")


def _browser_env(home) -> dict[str, str]:
    """The browser's environment: ours without the sanitizer job's preloaded runtime (an
    ASan-preloaded Chromium hangs), with a home of its own."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONMALLOC")}
    env["HOME"] = str(home)
    return env


@pytest.mark.parametrize("width", [412, 1280])
def test_browser_screenshot(tmp_path, width):
    """A real browser opens the page from disk, offline, at a phone's and a desktop's width."""
    browser = chromium()
    page = tmp_path / "matrix.html"
    page.write_text(render_html(synthetic()), encoding="utf-8")
    shot = tmp_path / "matrix.png"
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", f"--window-size={width},900",
                          f"--screenshot={shot}", page.as_uri()],
                         capture_output=True, text=True, timeout=120,
                         env=_browser_env(tmp_path))
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])                     # the IHDR chunk
    assert (w, h) == (width, 900)
    image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshot's pixels")
    with image.open(shot) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 16) or []
    assert len(colours) > 8                                      # drawn, not a blank page
