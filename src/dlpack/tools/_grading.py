"""What the checker's suites share (``check``'s producers and their Arrow rules,
``check_consumer``'s consumers): a rule's verdict, the registry rules are declared in, grading
one rule, and the crash-isolated runner that grades a whole suite, one child process at a time.

A suite is a subject (made from the ``MODULE:CALLABLE`` given on the command line) and the
registries of its rules, in the order they run. Each rule returns its evidence of a pass or
raises ``Fail`` / ``NA``; ``check_isolated`` runs the rules in a child (``python -m MODULE
--worker``) that reports each one before and after it runs, so a crash fails the rule that was
running and the next rule resumes in a fresh child (docs/spec.md §12, §12.1).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # before TensorFlow is imported: no C++ logs

import ctypes
import datetime
import faulthandler
import importlib
import json
import re
import secrets
import signal
import subprocess
import sys
import sysconfig
import textwrap
import weakref
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

import dlpack._capsule_api as _capi
from dlpack.tools._child import Child
from dlpack.tools._cli import quiet_native_stderr

VERSIONED, LEGACY = b"dltensor_versioned", b"dltensor"
TIMEOUT = 300          # seconds one rule (or importing and calling the factory) may take
CAPSULE = type(datetime.datetime_CAPI)
Trampoline = ctypes.CFUNCTYPE(None, ctypes.c_void_p)    # a deleter the checker writes


@dataclass
class Result:
    """One rule's verdict: ``pass``, ``fail`` or ``n/a``, and what was seen."""

    rule: str
    status: str
    evidence: str


EVIDENCE_LIMIT = 500    # characters of one verdict's evidence: a producer's text is not ours


_WORD = re.compile(r"\S+")


def _evidence(text: str, limit: int = EVIDENCE_LIMIT) -> str:
    """Evidence on one line of printable text (whitespace runs one space, other unprintable
    characters escaped: a terminal escape or a lone surrogate in a producer's text must not
    garble the report or its encoding), at most ``limit`` characters and a count of the
    producer's characters cut (its exception message or repr may be megabytes)."""
    out: list[str] = []
    size = 0
    for word in _WORD.finditer(text):
        if out:
            out.append(" ")
            size += 1
        for i, c in enumerate(word[0]):
            if not c.isprintable():
                c = c.encode("unicode_escape").decode("ascii")
            if size + len(c) > limit:
                cut = len(text) - word.start() - i
                return f"{''.join(out).rstrip()}… ({cut} more characters)"
            out.append(c)
            size += len(c)
    return "".join(out)


def named(obj: object) -> str:
    """type(obj).__name__ as plain text, whatever obj's metaclass makes of that attribute."""
    return str.__str__(type.__dict__["__name__"].__get__(type(obj)))


def said(e: BaseException) -> str:
    """str(e) of an exception a producer or consumer raised, for evidence: it cannot raise
    (no str subclass's method is called), and it is escaped and bounded (it may be megabytes),
    to a part of the evidence it goes into."""
    return _evidence(_said(e), EVIDENCE_LIMIT // 3)


def raised(e: BaseException) -> str:
    """"Name: message" of an exception, for evidence, built as ``named`` and ``said`` are."""
    return f"{named(e)}: {said(e)}"


def _said(e: BaseException) -> str:
    """str(e) as plain text (a str subclass's methods, which a producer may make raise, are
    not called), or what stands for it where the producer's __str__ raises."""
    try:
        return str.__str__(str(e))
    except Exception as inner:
        return f"<{named(e)} whose str() raised {named(inner)}>"


class Fail(Exception):
    """A rule failed; the message is the evidence."""


class NA(Exception):
    """The rule does not apply to this subject; the message says why."""


def capsule_name(capsule) -> bytes | None:
    """The capsule's name as bytes (None for an unnamed capsule)."""
    return _capi.GetName(capsule)


def compact(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The strides, in elements, of a C-contiguous array of ``shape``."""
    strides, step = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i], step = step, step * shape[i]
    return tuple(strides)


def what(obj: object) -> str:
    """An object for a message: its type, and its value when short."""
    try:
        text = str.__str__(repr(obj))
    except Exception:           # a repr that raises: the type alone
        text = "?" * 41
    return f"{named(obj)} {text}" if len(text) <= 40 else f"a {named(obj)} object"


# -- rules and their registries ------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """``grade(subject)`` returns the evidence of a pass, or raises Fail / NA."""

    name: str
    grade: Callable[[Any], str]
    needs_export: bool      # n/a without grading when the subject is not ``usable``


class Registry:
    """One group of rules, in the order they run, each declared with ``@RULES.rule(name)``.

    ``view``: what the group's rules grade, made once per subject from the suite's subject
    (None: the subject itself); it may raise NA, which makes each of them n/a.
    """

    def __init__(self, view: Callable[[Any], Any] | None = None) -> None:
        self._rules: dict[str, Rule] = {}
        self._view = view
        self._views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def rule(self, name: str, *, needs_export: bool = True
             ) -> Callable[[Callable[[Any], str]], Callable[[Any], str]]:
        """Register a rule under ``name``; it runs after those registered before it.

        ``needs_export``: n/a without grading when the suite's first rule found nothing to
        grade (a producer whose basic-export failed).
        """
        def register(grade: Callable[[Any], str]) -> Callable[[Any], str]:
            if name in self._rules:
                raise ValueError(f"rule {name!r} is registered twice")
            self._rules[name] = Rule(name, grade, needs_export)
            return grade
        return register

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __getitem__(self, name: str) -> Rule:
        return self._rules[name]

    def view_of(self, subject: Any) -> Any:
        """What this group's rules grade of ``subject`` (its view, made on first use)."""
        if self._view is None:
            return subject
        if subject not in self._views:
            self._views[subject] = self._view(subject)
        return self._views[subject]


# -- suites, and grading one rule ----------------------------------------------------------------

@dataclass(frozen=True)
class Suite:
    """What ``check_isolated`` grades: a subject made from the loaded callable, and the
    registries of its rules.

    The subject has ``usable`` (the rules that need an export are n/a while it is false),
    ``_alive`` (objects a rule keeps until it ends), and ``state()`` / ``restore(state)`` (what
    later rules need from earlier ones, carried into the child that resumes after a crash).
    """

    module: str                  # its children run ``python -m MODULE --worker``
    registries: tuple[Registry, ...]
    subject: Callable[[Callable[..., object]], Any]     # built from the loaded callable
    crashed: str                 # how a crash is reported: "the producer crashed a consumer"
    loading: str                 # what ran when the first child died: "importing and calling…"
    load_rule: str = "factory"   # the result's rule when the callable cannot be loaded
    who: str = "producer"

    @property
    def rules(self) -> list[str]:
        """Every rule's name, in the order they run (the JSON's order)."""
        return [name for registry in self.registries for name in registry]

    def registry(self, name: str) -> Registry:
        """The registry that declares rule ``name``."""
        for registry in self.registries:
            if name in registry:
                return registry
        raise KeyError(name)

    def grade(self, s: Any, name: str) -> Result:
        """One rule's result; a rule that raises unexpectedly fails with what it raised."""
        registry = self.registry(name)
        r = registry[name]
        if r.needs_export and not s.usable:
            return Result(name, "n/a", f"not graded: {self.rules[0]} did not pass")
        try:
            status, evidence = "pass", r.grade(registry.view_of(s))
        except Fail as e:
            status, evidence = "fail", _said(e)
        except NA as e:
            status, evidence = "n/a", _said(e)
        except Exception as e:
            status, evidence = "fail", f"raised {named(e)}: {_said(e)}"
        finally:
            s._alive.clear()
        return Result(name, status, _evidence(evidence))


# -- loading the callable under test -------------------------------------------------------------

def load(spec: str) -> Callable[[], object]:
    """``MODULE:FACTORY`` → the factory."""
    module, sep, factory = spec.partition(":")
    if not sep or not module or not factory:
        raise ValueError(f"{spec!r} is not MODULE:FACTORY (e.g. dlpack.tools.producers:numpy)")
    return getattr(importlib.import_module(module), factory)


_LOAD_ERRORS = """\
import json, os, sys
from dlpack.tools._grading import load, raised
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
for spec in sys.argv[1:]:
    try:
        load(spec)
        error = ""
    except ImportError as e:
        error = (f"{raised(e)} (python -m dlpack check runs from {os.getcwd()}; is the module "
                 "on PYTHONPATH?)")
    except Exception as e:
        error = raised(e)
    out.write(json.dumps([spec, error]) + "\\n")
    out.flush()
"""


def load_errors(specs: list[str]) -> dict[str, str]:
    """Why each ``MODULE:CALLABLE`` that cannot be imported or found cannot (a usage error,
    spec §12), asked in one child: a module that prints as it is imported leaves the answers
    alone, and one that crashes or exits ends only the child (it and the specs after it are then
    graded, and the child grading it reports that)."""
    try:
        done = subprocess.run([sys.executable, "-c", _LOAD_ERRORS, *specs], capture_output=True,
                              stdin=subprocess.DEVNULL, env=_child_env(), text=True,
                              encoding="utf-8", errors="replace", timeout=TIMEOUT)
    except subprocess.TimeoutExpired:      # each is graded: its child reports the hang
        return {}
    errors = {}
    for line in done.stdout.splitlines():
        try:
            spec, error = json.loads(line)
        except (ValueError, TypeError):
            continue
        if spec in specs and error and isinstance(error, str):
            errors[spec] = error
    return errors


# -- the crash-isolated runner -------------------------------------------------------------------

def worker(spec: str, start: int, state: dict, suite: Suite) -> NoReturn:
    """The child of ``check_isolated``: a JSON line before and after each rule, on the original
    standard output, each after the run's key; whatever else is printed goes to the parent's
    log. The key comes on standard input, which is then /dev/null: code under test that finds
    the channel among its descriptors has no key to write a line the parent takes."""
    line = b""
    while not line.endswith(b"\n") and (chunk := os.read(0, 64)):
        line += chunk
    key = line.decode("ascii").strip()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    pid = os.getpid()

    def send(**message) -> None:
        if os.getpid() != pid:      # a fork of the worker (inside __dlpack__) never reports:
            os._exit(0)             # it ends where it would have, before a second result
        channel.write(f"{key} {json.dumps(message, ensure_ascii=False)}\n")
        channel.flush()

    with quiet_native_stderr():
        faulthandler.enable(sys.stderr)
        send(start=suite.load_rule)
        try:
            s = suite.subject(load(spec))
        except Exception as e:
            send(result=asdict(Result(suite.load_rule, "fail",
                                      raised(e))))
            os._exit(0)
        s.restore(state)
        for name in suite.rules[start:]:
            send(start=name)
            result = suite.grade(s, name)
            send(result=asdict(result), state=s.state())
        channel.flush()
        os._exit(0)          # no interpreter teardown: a producer's leftovers cannot crash it


def worker_main(argv: list[str], suite: Suite) -> NoReturn:
    """``python -m MODULE --worker SPEC START STATE``, as ``check_isolated`` starts it."""
    if argv[:1] != ["--worker"] or len(argv) != 4:
        sys.exit(f"python -m {suite.module} is the checker's worker; the command is "
                 "python -m dlpack check")
    worker(argv[1], int(argv[2]), json.loads(argv[3]), suite)


def _crash(rc: int | None, log: str) -> str:
    """How a child ended early (signal, exit status or timeout), and where, from its log."""
    if rc is None:
        return f"it ran past {TIMEOUT} s and was stopped"
    if rc < 0:
        try:
            said = f"signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            said = f"signal {-rc}"
    else:
        said = f"exit status {rc}"
    tried = re.findall(r"^check: trying (.+)$", log, re.M)     # a rule's case, if it named it
    said += f", trying {tried[-1]}" if tried else ""
    stdlib = sysconfig.get_paths()["stdlib"]
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)',
                        log.split("Fatal Python error")[-1])
    frames = [f for f in frames if not f[0].startswith(stdlib)] or frames
    if frames:        # faulthandler lists the most recent call first
        path, line, function = frames[0]
        return f"{said}; last Python frame: {os.path.basename(path)}:{line} in {function}"
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return f"{said}; it said: {lines[-1]}" if lines and rc > 0 else said


def _child_env() -> dict[str, str]:
    """The parent's environment, with its module path: MODULE resolves as it does here."""
    paths = [p or os.getcwd() for p in sys.path]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def check_isolated(spec: str, suite: Suite) -> Iterator[Result]:
    """Every rule of ``suite`` against ``MODULE:CALLABLE``, run in child processes, yielded as
    decided.

    A crash (or a rule running past TIMEOUT) fails the rule that was running, and the rules
    after it resume in a new child; when the first rule is what crashed, the rules that need
    an export are n/a. A callable that cannot be loaded or called gives one result, under
    ``suite.load_rule``.
    """
    rules, load_rule = suite.rules, suite.load_rule
    state: dict = {}
    start = 0
    while start < len(rules):
        key = secrets.token_hex(16)         # a new one per child: the worker's lines carry it
        with Child(["-m", suite.module, "--worker", spec, str(start), json.dumps(state)],
                   _child_env(), TIMEOUT, stdin=key + "\n") as child:
            running: str | None = None
            scribbled: str | None = None    # a line the producer wrote into the channel
            for line in child.lines():
                try:
                    head, _, body = line.partition(" ")
                    if head != key:
                        raise ValueError("not the worker's")
                    message = json.loads(body)
                    if "start" in message:
                        running = message["start"]
                        continue
                    result = Result(**message["result"])
                    if result.rule != running or (result.rule != load_rule and type(
                            message["state"]) is not dict):
                        raise ValueError(result.rule)
                except (ValueError, TypeError, KeyError):
                    child.kill()
                    scribbled = (f"the {suite.who} wrote into the checker's result channel: "
                                 f"{line.strip()[:80]!r}")
                    break
                running = None
                if result.rule == load_rule:
                    child.finish()
                    yield result
                    return
                state = message["state"]
                start += 1
                yield result
                if start >= len(rules):
                    break
            timed_out = child.timed_out
            rc = child.finish()         # every rule reported: the worker exits at once
            if start >= len(rules):
                return
            how = _crash(None if timed_out else rc, child.log())
        if start == 0 and running in (None, load_rule):
            yield Result(load_rule, "fail", scribbled or _evidence(
                f"{suite.loading} ended the checker's child process: {how}"))
            return
        yield Result(rules[start], "fail", scribbled or _evidence(
            f"{suite.crashed}: {how}" if not timed_out
            else f"the rule did not finish: {how}"))
        if start == 0:
            state = {"usable": False}
        start += 1


# -- results as text -----------------------------------------------------------------------------

def render_result(r: Result, width: int, column: int, allowed: bool = False) -> str:
    """One rule's line(s): status, rule (in a ``column`` as wide as the longest name),
    evidence wrapped under itself, nothing cut; a failure ``allowed`` (--allow-fail) says so."""
    head = f"  {r.status:<4}  {r.rule:<{column}}  "
    indent = len(head)
    evidence = f"(allowed failure, --allow-fail) {r.evidence}" if allowed and \
        r.status == "fail" else r.evidence
    if width - indent < 30:                  # too narrow for a column: evidence below
        return "\n".join([head.rstrip(), *textwrap.wrap(
            evidence, max(width - 8, 20), initial_indent=" " * 8, subsequent_indent=" " * 8,
            break_long_words=False, break_on_hyphens=False)])
    return "\n".join(textwrap.wrap(evidence, width, initial_indent=head,
                                   subsequent_indent=" " * indent, break_long_words=False,
                                   break_on_hyphens=False) or [head.rstrip()])


def verdict(results: list[Result], allowed: Collection[str] = ()) -> str:
    """The report's last line: how many rules failed, and how many of them are ``allowed``."""
    fails = sum(r.status == "fail" for r in results)
    excused = sum(r.status == "fail" and r.rule in allowed for r in results)
    if not fails:
        return "  every rule passed or does not apply"
    said = f"  {fails} rule{'s' * (fails != 1)} failed"
    if excused == fails:
        return f"{said}, {'each ' * (fails > 1)}allowed by --allow-fail"
    return f"{said} ({excused} allowed by --allow-fail)" if excused else said
