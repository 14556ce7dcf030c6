"""Whether memory can be read, asked of the kernel instead of found out by a crash: what the
checker's rules (``check``, ``check_arrow``) use before reading a pointer a producer gave."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable


def _libc_write() -> Callable[[int, int, int], int] | None:
    """``write(2)`` from the C library (None where there is none to load)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        write = libc.write
    except (OSError, AttributeError, TypeError):
        return None
    write.restype = ctypes.c_ssize_t
    write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    return write


_write = _libc_write()


def readable(address: int | None, size: int) -> bool:
    """Whether ``size`` bytes at ``address`` can be read, asked of the kernel.

    ``write(2)`` of that memory into a pipe fails with EFAULT where reading it would fault, so
    a wild pointer is reported instead of crashing the checker. Where there is no C library to
    ask, True: the child process still contains the crash.
    """
    if not address:
        return False
    if _write is None or size <= 0:
        return True
    r, w = os.pipe()
    try:
        return _write(w, address, size) == size
    finally:
        os.close(r)
        os.close(w)
