"""The crash-isolated child both the checker (``check_isolated``) and the hostile corpus's test
run: a child interpreter whose standard output is read line by line as it comes, whatever it
writes to standard error kept in a log, and which is stopped when it stays silent too long.

What the lines mean, and where a run resumes after a crash, is the caller's: this module only
keeps a child that segfaults, aborts or hangs from taking the caller down with it.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType

POLL = 0.1             # seconds between looks at the child while its output is quiet
GRACE = 2.0            # seconds to read what an exited child wrote (a fork may keep it open)


class Child:
    """``python ARGS...`` in a child process; use as a context manager (it holds the log)."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], timeout: float,
                 stdin: str | None = None) -> None:
        """``stdin``: text the child reads on its standard input, then end of file (none:
        /dev/null); unlike its arguments and environment, /proc does not show it."""
        self.timeout = timeout
        self.timed_out = False          # True once lines() stopped it for its silence
        self._log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self.process = subprocess.Popen(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=self._log,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, env=dict(env),
            text=True, encoding="utf-8", errors="replace")
        if stdin is not None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(stdin)
                self.process.stdin.close()
            except BrokenPipeError:         # it died first: its exit status says how
                pass
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def lines(self) -> Iterator[str]:
        """Each line the child writes, as it comes; ends when its output ends, GRACE seconds
        after it exits, or when ``timeout`` seconds pass without a line (it is killed)."""
        last = time.monotonic()         # when the last line came
        exited: float | None = None     # when the child was seen gone
        while True:
            try:
                line = self._lines.get(timeout=POLL)
            except queue.Empty:
                now = time.monotonic()
                if exited is None and self.process.poll() is not None:
                    exited = now
                if exited is not None:
                    if now - exited >= GRACE:   # what it wrote is read by now; a fork of it
                        return                  # (a producer's pool) may hold the pipe
                elif now - last >= self.timeout:
                    self.process.kill()
                    self.timed_out = True
                    return
                continue
            last = time.monotonic()
            if line is None:
                return
            yield line

    def kill(self) -> None:
        self.process.kill()

    def finish(self) -> int:
        """The child's exit status (negative: the signal), killing it if it does not end
        within ``timeout`` seconds."""
        try:
            return self.process.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def log(self) -> str:
        """Everything the child wrote to standard error."""
        self._log.seek(0)
        return self._log.read()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._log.close()
