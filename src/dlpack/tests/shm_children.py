"""What the processes of test_shared_memory run (spec §11's shared host memory): importable by a
spawned child, and importing only NumPy and dlpack there (a child importing torch or TensorFlow
starts slowly)."""

import os
import pickle
import signal


def mapping_perms(address: int) -> str:
    """The /proc/self/maps permissions and path of the mapping holding address."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[1] + " " + (fields[5] if len(fields) > 5 else "")
    return ""


def memfds(pid: int | str = "self") -> int:
    """How many descriptors of pydlpack segments the process holds."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:pydlpack-shm")
        except OSError:
            pass
    return n


def mapped(pid: int | str = "self") -> int:
    """How many mappings of pydlpack segments the process has."""
    with open(f"/proc/{pid}/maps") as f:
        return sum("memfd:pydlpack-shm" in line for line in f)


def look(x):
    """(values, read-only flag, writeable in NumPy, mapping permissions) of x."""
    import numpy

    a = numpy.from_dlpack(x)
    return a.tolist(), x.readonly, a.flags.writeable, mapping_perms(x.data_ptr)


def write_first(x, value=99.0):
    """Write x's first element (through NumPy) and say what the process saw."""
    import numpy

    a = numpy.from_dlpack(x)
    a.reshape(-1)[0] = value
    return a.tolist()


def look_and_write(x, q):
    """Process target: put what x looks like, write its first element, put it back."""
    q.put(look(x))
    if not x.readonly:
        write_first(x)
    q.put(x)


def load_stream(stream, q):
    """Process target: load a pickle made with any protocol, write through it, report."""
    x = pickle.loads(stream)
    if q is not None:
        q.put(look(x))
    if not x.readonly:
        write_first(x, 7.0)


def forward(x):
    """A worker's forwarding: its own pickle of what it received, and its pid."""
    return pickle.dumps(x), os.getpid()


def make_and_send(q, hold, readonly=False):
    """Process target: share new data, send it, keep it until told (hold), then drop it."""
    import numpy

    import dlpack

    x = dlpack.share(numpy.arange(8, dtype=numpy.float64), readonly=readonly)
    q.put(pickle.dumps(x))
    hold.wait(60)


def make_and_exit(q):
    """Process target: share new data, send its pickle, exit at once (drops it)."""
    import numpy

    import dlpack

    q.put(pickle.dumps(dlpack.share(numpy.arange(4.0))))


def receive_and_wait(stream, q, hold):
    """Process target: load a handle, say so, wait to be killed."""
    x = pickle.loads(stream)
    q.put((x.data_ptr != 0, memfds()))
    hold.wait(60)


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)
