"""What the command-line tools share (``python -m dlpack``, ``check``, ``check --consumer``):
the usage-error parser, wrapping to the terminal, and keeping native stderr off the screen."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import textwrap
from typing import NoReturn

EXIT_USAGE = 2          # every tool's exit status for a usage error


@contextlib.contextmanager
def quiet_native_stderr():
    """Keep what native code writes straight to file descriptor 2 off the screen.

    TensorFlow's absl and oneDNN lines (and their number) depend on its version and on the
    CPU, and TF_CPP_MIN_LOG_LEVEL does not silence all of them; they reach descriptor 2 before
    Python sees them. Inside the block descriptor 2 is /dev/null, and ``sys.stderr`` writes to
    the real one, so Python's warnings, tracebacks and our progress line still show.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):    # no descriptor 2 at all: nothing to hide
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    old = sys.stderr
    terminal = open(saved, "w", encoding=getattr(old, "encoding", None) or "utf-8",
                    errors="backslashreplace", closefd=False)
    try:
        os.dup2(null, 2)
        sys.stderr = terminal
        yield
    finally:
        terminal.flush()
        sys.stderr = old
        os.dup2(saved, 2)
        terminal.close()
        os.close(saved)
        os.close(null)


def terminal_width() -> int:
    """Columns of the terminal (``COLUMNS`` first; 80 when it cannot be known), at least 40."""
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def wrap(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """Wrap to ``width`` columns without ever dropping a word (long tokens are not broken);
    continuation lines start with ``indent``, the first with ``first`` (default: ``indent``)."""
    first = indent if first is None else first
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


class JsonArgumentParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are JSON on stdout as well when ``--json`` was
    asked for: ``{"schema", "error", "exit_status": 2}`` (the usage still goes to stderr)."""

    def __init__(self, schema: str, text: str, width: int, **kwargs) -> None:
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="\n".join(wrap(text, width)), **kwargs)
        self.schema = schema
        self.wants_json = False

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        args = sys.argv[1:] if args is None else list(args)
        self.wants_json = "--json" in args
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """argparse's usage and message on stderr, the message wrapped to the terminal."""
        if self.wants_json:
            print(json.dumps({"schema": self.schema, "error": f"{self.prog}: {message}",
                              "exit_status": EXIT_USAGE}), flush=True)
        self.print_usage(sys.stderr)
        text = "\n".join(wrap(f"{self.prog}: error: {message}", terminal_width(), "  ", ""))
        self.exit(EXIT_USAGE, text + "\n")
