"""``python -m dlpack check``: the command line of both checkers (producers' ``check``,
consumers' ``check_consumer``): arguments and usage errors, the reports as text or JSON (the
schema is in docs/check.md), and the exit status (docs/spec.md §12).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from dlpack.tools import check_consumer
from dlpack.tools._cli import JsonArgumentParser, terminal_width
from dlpack.tools._cli import wrap as _wrap
from dlpack.tools._grading import check_isolated, load_errors, render_result, verdict
from dlpack.tools.check import PRODUCERS

SCHEMA = "pydlpack-check/1"
# One column for the rule names of every report, producers' and consumers' alike.
_COLUMN = max(len(name) for suite in (PRODUCERS, check_consumer.SUITE)
              for name in [*suite.rules, suite.load_rule])


def _epilog(width: int) -> str:
    """--help's list of rules (producers', then consumers') and exit statuses, to ``width``."""
    lines: list[str] = []
    for title, suite in (
            ("rules, in the order they run (docs/check.md says what each tries):", PRODUCERS),
            ("--consumer MODULE:CALLABLE, CALLABLE(producer) returning an array, rules:",
             check_consumer.SUITE)):
        lines += ["", title] if lines else [title]
        column = max(len(n) for n in suite.rules)
        for name in suite.rules:
            doc = (suite.registry(name)[name].grade.__doc__ or "").strip()
            summary = " ".join(doc.split("\n\n")[0].split())     # the whole first paragraph
            lines += _wrap(summary, width, " " * (column + 3), f"  {name:<{column}} ")
    lines += ["", *_wrap("exit status: 0 every rule passed, does not apply, or failed and is "
                         "named by --allow-fail; 1 another rule failed (or a factory raised or "
                         "crashed when called); 2 usage error (a MODULE:CALLABLE that cannot be "
                         "imported or has no such name included)", width)]
    return "\n".join(lines)


def _parser(width: int) -> JsonArgumentParser:
    parser = JsonArgumentParser(
        SCHEMA, "Grade a DLPack producer: FACTORY() returns an object with __dlpack__ (or a "
        "capsule); each rule a consumer relies on is reported pass / fail / n/a with the "
        "evidence. Each producer runs in a child process: one that crashes its consumer fails "
        "the rule that was running.", width, prog="python -m dlpack check", epilog=_epilog(width))
    parser.add_argument("factory", nargs="+", metavar="MODULE:FACTORY",
                        help="e.g. dlpack.tools.producers:numpy")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output (schema in docs/check.md)")
    parser.add_argument("--consumer", action="store_true",
                        help="grade consumers instead: each MODULE:CALLABLE takes a producer "
                        "and returns an array (numpy:from_dlpack; docs/check.md)")
    parser.add_argument("--allow-fail", action="append", default=[], metavar="RULE",
                        help="a rule known to fail: its failure is still reported, marked "
                        "allowed, and does not make the exit status 1 (repeatable; e.g. "
                        "--consumer --allow-fail hostile)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m dlpack check``: exit status 1 when a rule not named by --allow-fail fails
    (or a factory cannot be called), 2 on usage errors."""
    width = terminal_width()
    parser = _parser(width)
    args = parser.parse_args(argv)
    malformed = [f for f in args.factory if not all(f.partition(":")[::2])]
    if malformed:
        parser.error(f"{', '.join(malformed)}: expected MODULE:FACTORY, a module and the name "
                     "of a callable in it (e.g. dlpack.tools.producers:numpy)")
    suite, key, head = PRODUCERS, "factory", "python -m dlpack check"
    if args.consumer:
        suite, key, head = check_consumer.SUITE, "consumer", f"{head} --consumer"
    unknown = [name for name in args.allow_fail if name not in suite.rules]
    if unknown:
        parser.error(f"--allow-fail {', '.join(unknown)}: no such {suite.who} rule; they are "
                     + ", ".join(suite.rules))
    if suite.rules[0] in args.allow_fail:
        parser.error(f"--allow-fail {suite.rules[0]}: every other rule is graded only when it "
                     "passes, so allowing it would pass what nothing was graded on")
    allowed = frozenset(args.allow_fail)
    errors = load_errors(args.factory)      # one that cannot be imported or found: nothing runs
    if errors:
        parser.error("; ".join(f"{spec}: {error}" for spec, error in errors.items()))
    reports, status = [], 0
    for spec in args.factory:
        if not args.json:
            print(f"{head} {spec}", flush=True)
        results = []
        for r in check_isolated(spec, suite):
            results.append(r)
            if not args.json:
                print(render_result(r, width, _COLUMN, r.rule in allowed), flush=True)
        status |= any(r.status == "fail" and r.rule not in allowed for r in results)
        reports.append({key: spec, "results": [
            dict(asdict(r), allowed=r.status == "fail" and r.rule in allowed) for r in results]})
        if not args.json:
            print(verdict(results, allowed), flush=True)
    if args.json:
        print(json.dumps({"schema": SCHEMA, "allow_fail": sorted(allowed), "reports": reports,
                          "exit_status": status}, indent=1, ensure_ascii=False))
    return status


if __name__ == "__main__":
    sys.exit(main())
