# Shared host memory (docs/spec.md §11): a segment several processes map, for dlpack.share and
# its pickles. A segment is a memfd (Linux): private to its user by construction (0600, no
# name in any directory), freed by the kernel when the last process holding it exits or closes
# it, a SIGKILLed one included. It is sealed against shrinking and growing, so that a mapping
# never reaches past its end (a read there is SIGBUS, not an exception), and starts with a
# header page: a magic, a 128-bit random token that only its pickles carry, the read-only flag,
# the serial of the next pickle and a bit per serial set by its first load (every process keeps
# what it pickled alive until each of its pickles was loaded, spec §11). Another process opens
# it as /proc/PID/fd/FD and checks device, inode, seals, size, magic and token before it maps a
# byte of data; read-only data is mapped copy-on-write in every process.

import errno as _errno
import os as _os
import weakref as _weakref

# The way out of running short of descriptors: a segment holds one in every process mapping it.
cdef str _SHM_NOFILE = (" (each shared segment holds a descriptor in every process that maps it: "
                        "drop shared objects no longer used, or raise the limit, ulimit -n or "
                        "resource.setrlimit(resource.RLIMIT_NOFILE, ...))")


cdef extern from *:
    """
    #include <errno.h>
    #include <fcntl.h>
    #include <stdio.h>
    #include <string.h>
    #include <sys/mman.h>
    #include <sys/stat.h>
    #include <unistd.h>
    #ifdef __linux__
    #include <sys/syscall.h>
    #include <sys/sysinfo.h>
    #endif
    /* manylinux2014's headers predate memfd: its numbers, as the kernel defines them */
    #if defined(__linux__) && !defined(SYS_memfd_create)
    #if defined(__x86_64__)
    #define SYS_memfd_create 319
    #elif defined(__aarch64__)
    #define SYS_memfd_create 279
    #endif
    #endif
    #ifndef F_ADD_SEALS
    #define F_ADD_SEALS 1033
    #define F_GET_SEALS 1034
    #define F_SEAL_SEAL 1
    #define F_SEAL_SHRINK 2
    #define F_SEAL_GROW 4
    #endif
    #define DLPK_SHM_HEAD 4096          /* the header page: data starts page-aligned after it */
    #define DLPK_SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)
    static const char dlpk_shm_magic[8] = {'p', 'y', 'd', 'l', 'p', 'k', 's', '1'};
    typedef struct {
        char magic[8];
        unsigned char token[16];
        uint64_t readonly;
        uint64_t pickled;               /* pickles made, by every process: the next serial */
        uint64_t loaded[(DLPK_SHM_HEAD - 40) / 8];  /* bit n: pickle n was loaded */
    } dlpk_shm_header;
    #define DLPK_SHM_SERIALS ((uint64_t)(DLPK_SHM_HEAD - 40) / 8 * 64)

    /* This machine's memory and swap in bytes (0: unknown). Shared memory is not refused when
       it is mapped, as malloc refuses what it cannot hold: filling more than there is kills
       the process (the OOM killer, or SIGBUS) instead. */
    static uint64_t dlpk_shm_memory(void) {
    #ifdef __linux__
        struct sysinfo si;
        if (sysinfo(&si) != 0) return 0;
        return ((uint64_t)si.totalram + (uint64_t)si.totalswap) * (uint64_t)si.mem_unit;
    #else
        return 0;
    #endif
    }

    /* A new sealed segment of DLPK_SHM_HEAD + size bytes, mapped read-write at *base, its
       header written; 0, or an errno. */
    static int dlpk_shm_create(uint64_t size, const unsigned char *token, int *fd,
                               char **base) {
    #if defined(__linux__) && defined(SYS_memfd_create)
        int err;
        dlpk_shm_header *h;
        void *p;
        int f = (int)syscall(SYS_memfd_create, "pydlpack-shm", 1u | 2u); /* CLOEXEC, SEALING */
        if (f < 0) return errno;
        if (ftruncate(f, (off_t)(DLPK_SHM_HEAD + size)) != 0
                || fcntl(f, F_ADD_SEALS, DLPK_SHM_SEALS | F_SEAL_SEAL) != 0) {
            err = errno; close(f); return err;
        }
        p = mmap(NULL, DLPK_SHM_HEAD + size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (p == MAP_FAILED) { err = errno; close(f); return err; }
        h = (dlpk_shm_header *)p;
        memcpy(h->magic, dlpk_shm_magic, 8);
        memcpy(h->token, token, 16);
        *fd = f;
        *base = (char *)p;
        return 0;
    #else
        (void)size; (void)token; (void)fd; (void)base;
        return ENOSYS;
    #endif
    }

    enum { SHM_OK, SHM_OPEN, SHM_STAT, SHM_INODE, SHM_SEALS, SHM_SIZE, SHM_MAP, SHM_MAGIC,
           SHM_TOKEN };
    /* Open another process's segment (/proc/pid/fd/fd) and map it read-write, each check
       before the next: SHM_OK with *base, *size (the whole mapping) and *fd_out, or the step
       that failed with *err its errno (0 for a check that failed). The descriptor is first
       opened as a path only (O_PATH: no driver's open runs, so a reused number naming a
       terminal or a leased file has no effect) and opened for reading and writing only once
       its device and inode are the segment's; the size is read after the seals are checked,
       which keep it from changing. */
    static int dlpk_shm_open(long long pid, long long fd, unsigned long long dev,
                             unsigned long long ino, const unsigned char *token, int *fd_out,
                             char **base, uint64_t *size, int *err) {
    #ifdef __linux__
        char path[64];
        struct stat st;
        void *p;
        int f, at, seals, step = SHM_OK;
        *err = 0;
        snprintf(path, sizeof path, "/proc/%lld/fd/%lld", pid, fd);
        at = open(path, O_PATH | O_CLOEXEC);
        if (at < 0) { *err = errno; return SHM_OPEN; }
        if (fstat(at, &st) != 0) { *err = errno; close(at); return SHM_STAT; }
        if ((unsigned long long)st.st_dev != dev || (unsigned long long)st.st_ino != ino) {
            close(at);
            return SHM_INODE;
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", at);
        f = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        if (f < 0) *err = errno;
        close(at);
        if (f < 0) return SHM_OPEN;
        if ((seals = fcntl(f, F_GET_SEALS)) < 0
                || (seals & DLPK_SHM_SEALS) != DLPK_SHM_SEALS)
            step = SHM_SEALS;
        else if (fstat(f, &st) != 0) { *err = errno; step = SHM_STAT; }
        else if (st.st_size < DLPK_SHM_HEAD)
            step = SHM_SIZE;
        if (step != SHM_OK) { close(f); return step; }
        p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (p == MAP_FAILED) { *err = errno; close(f); return SHM_MAP; }
        step = memcmp(((dlpk_shm_header *)p)->magic, dlpk_shm_magic, 8) ? SHM_MAGIC
             : memcmp(((dlpk_shm_header *)p)->token, token, 16) ? SHM_TOKEN : SHM_OK;
        if (step != SHM_OK) { munmap(p, (size_t)st.st_size); close(f); return step; }
        *fd_out = f;
        *base = (char *)p;
        *size = (uint64_t)st.st_size;
        return SHM_OK;
    #else
        (void)pid; (void)fd; (void)dev; (void)ino; (void)token; (void)fd_out; (void)base;
        (void)size;
        *err = ENOSYS;
        return SHM_OPEN;
    #endif
    }

    /* Read-only data: its pages mapped copy-on-write in place, so that no process can change
       what the others read, and a consumer that ignores READ_ONLY (torch) writes into private
       copies of the pages it touches instead of faulting. */
    static int dlpk_shm_private(char *base, uint64_t size, int fd) {
        if (size <= DLPK_SHM_HEAD) return 0;
        return mmap(base + DLPK_SHM_HEAD, size - DLPK_SHM_HEAD, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_FIXED, fd, DLPK_SHM_HEAD) == MAP_FAILED ? errno : 0;
    }
    static void dlpk_shm_close(char *base, uint64_t size, int fd) {
        if (base) munmap(base, size);
        if (fd >= 0) close(fd);
    }
    static uint64_t dlpk_shm_serial(char *base) {      /* a new pickle's serial */
        return __atomic_fetch_add(&((dlpk_shm_header *)base)->pickled, 1, __ATOMIC_SEQ_CST);
    }
    static void dlpk_shm_mark(char *base, uint64_t serial) {   /* pickle serial was loaded */
        if (serial < DLPK_SHM_SERIALS)
            __atomic_fetch_or(&((dlpk_shm_header *)base)->loaded[serial / 64],
                              (uint64_t)1 << (serial % 64), __ATOMIC_SEQ_CST);
    }
    static int dlpk_shm_marked(char *base, uint64_t serial) {  /* beyond the bits: never */
        return serial < DLPK_SHM_SERIALS
            && (__atomic_load_n(&((dlpk_shm_header *)base)->loaded[serial / 64],
                                __ATOMIC_SEQ_CST) >> (serial % 64)) & 1;
    }
    """
    int SHM_HEAD "DLPK_SHM_HEAD"
    uint64_t SHM_SERIALS "DLPK_SHM_SERIALS"
    enum:
        SHM_OK, SHM_OPEN, SHM_STAT, SHM_INODE, SHM_SEALS, SHM_SIZE, SHM_MAP, SHM_MAGIC, SHM_TOKEN
    ctypedef struct _ShmHeader "dlpk_shm_header":
        uint64_t readonly
    int _shm_create_c "dlpk_shm_create"(
        uint64_t size, const unsigned char *token, int *fd, char **base) nogil
    int _shm_open_c "dlpk_shm_open"(
        long long pid, long long fd, unsigned long long dev, unsigned long long ino,
        const unsigned char *token, int *fd_out, char **base, uint64_t *size, int *err) nogil
    uint64_t _shm_memory "dlpk_shm_memory"() nogil
    int _shm_private "dlpk_shm_private"(char *base, uint64_t size, int fd) nogil
    void _shm_close "dlpk_shm_close"(char *base, uint64_t size, int fd) nogil
    uint64_t _shm_serial "dlpk_shm_serial"(char *base) nogil
    void _shm_mark "dlpk_shm_mark"(char *base, uint64_t serial) nogil
    bint _shm_marked "dlpk_shm_marked"(char *base, uint64_t serial) nogil


@cython.final
@cython.auto_pickle(False)    # internal: never pickled (DLPackObject has its own reduce)
cdef class _Segment:
    """One process's mapping of a shared segment and its descriptor, both closed with the last
    view; the base of a shared DLPackObject. Another process names it by pid, fd, device and
    inode, and proves it knows it by the token."""
    cdef char *base                     # the header; the data is SHM_HEAD bytes further
    cdef uint64_t size                  # the whole mapping
    cdef int fd
    cdef readonly bint readonly         # the data is mapped read-only
    cdef readonly uint64_t dev
    cdef readonly uint64_t ino
    cdef readonly bytes token
    cdef object __weakref__

    def __cinit__(self):
        self.fd = -1

    def __dealloc__(self):
        _shm_close(self.base, self.size, self.fd)

    def __repr__(self):
        if self.base == NULL:
            return "<pydlpack shared segment, not mapped>"
        return f"<pydlpack shared segment of {self.size - SHM_HEAD} bytes>"

    cdef inline char *data(self) noexcept:
        return self.base + SHM_HEAD


# The tables below are changed only by single C-level operations on a dict, a list or a set
# while _shm_lock is held, never while Python code runs: a garbage collection, a finalizer or a
# signal handler can run inside any of these functions, and may share or pickle again on the
# same thread (so the lock is reentrant, and nothing is let go while it is held).
cdef dict _shm_mapped = {}          # (device, inode) -> weakref to this process's _Segment
cdef list _shm_pending = []         # (segment, serial) of each pickle made here, until loaded
cdef set _shm_kept = set()          # segments with pickles past the header's serials: kept
cdef object _shm_lock = _threading.RLock()


def _shm_after_fork():
    """A forked child's lock is a new one: another thread may have held the parent's."""
    global _shm_lock
    _shm_lock = _threading.RLock()


_os.register_at_fork(after_in_child=_shm_after_fork)


cdef _Segment _shm_map(_Segment seg):
    """The segment this process maps for seg's device and inode: seg, put in the table that
    same-process loads and further loads find it by, or the one there already (two loads of a
    segment racing map it once; the loser's mapping goes when its caller drops it, after the
    lock). Entries of segments gone since are dropped."""
    ref = _weakref.ref(seg)
    key = (seg.dev, seg.ino)
    with _shm_lock:
        dead = [k for k, r in _shm_mapped.items() if r() is None]
        for k in dead:
            del _shm_mapped[k]
        held = _shm_mapped.get(key)
        there = held() if held is not None else None
        if there is None:
            _shm_mapped[key] = ref
            there = seg
    return there


cdef _Segment _shm_lookup(object dev, object ino):
    """This process's mapping of the segment (dev, ino) names, or None."""
    with _shm_lock:
        ref = _shm_mapped.get((dev, ino))
    return ref() if ref is not None else None


cdef int _shm_stat(_Segment seg) except -1:
    """seg's device and inode (what names it in every process), and seg in the table."""
    st = _os.fstat(seg.fd)
    seg.dev, seg.ino = st.st_dev, st.st_ino
    _shm_map(seg)                       # a new inode: no other mapping of it
    return 0


cdef _Segment _shm_create(uint64_t nbytes, bint readonly):
    """A new segment with nbytes of data, mapped read-write here (read-only data is mapped
    copy-on-write once filled: _shm_seal)."""
    cdef _Segment seg = _Segment.__new__(_Segment)
    cdef bytes token = _os.urandom(16)
    cdef const unsigned char *tok = <const unsigned char *><char *>token
    cdef int rc
    cdef uint64_t memory = _shm_memory()
    if nbytes > <uint64_t>INT64_MAX - SHM_HEAD:
        raise MemoryError(f"share: {nbytes} bytes do not fit a segment")
    if memory and nbytes > memory:      # refused as malloc refuses it, not killed filling it
        raise MemoryError(f"share: {nbytes} bytes are more than this machine's memory and swap "
                          f"({memory} bytes); share a smaller part, or pickle by value")
    with nogil:
        rc = _shm_create_c(nbytes, tok, &seg.fd, &seg.base)
    if rc:
        why = (_SHM_NOFILE if rc in (_errno.EMFILE, _errno.ENFILE) else
               " (memfd_create; shared memory needs Linux 3.17 or newer)" if rc == _errno.ENOSYS
               else " (memfd_create)")
        raise Refusal(f"share: cannot make a shared segment of {nbytes} bytes: "
                      f"{_os.strerror(rc)}{why}; pickle the object by value instead: "
                      "pickle.dumps(asdlpack(x))")
    seg.size = SHM_HEAD + nbytes
    seg.token = token
    seg.readonly = readonly
    (<_ShmHeader *>seg.base).readonly = readonly
    _shm_stat(seg)
    return seg


cdef int _shm_seal(_Segment seg) except -1:
    """Map a read-only segment's data copy-on-write, once it is filled: a write by a consumer
    that ignores READ_ONLY changes no other process's data (spec §11)."""
    cdef int rc
    if seg.readonly:
        rc = _shm_private(seg.base, seg.size, seg.fd)
        if rc:
            raise OSError(rc, f"share: mmap (copy-on-write): {_os.strerror(rc)}")
    return 0


cdef tuple _SHM_STEPS = (
    None, "cannot be opened", "cannot be read", "is another file", "is not a sealed "
    "memfd, so not a pydlpack segment", "is smaller than a segment's header", "cannot be mapped",
    "is not a pydlpack segment (no magic)", "is a pydlpack segment with another token")


cdef _Segment _shm_open(object pid, object fd, object dev, object ino, bytes token):
    """The segment a pickle names, mapped once in this process and checked before use:
    device and inode, seals, size, magic, then the token, each refusal naming its field."""
    cdef _Segment seg
    cdef int step, err = 0
    cdef long long c_pid = pid, c_fd = fd
    cdef unsigned long long c_dev = dev, c_ino = ino
    cdef const unsigned char *tok = <const unsigned char *><char *>token
    seg = _shm_lookup(dev, ino)
    if seg is not None:
        return _shm_same_token(seg, token)
    seg = _Segment.__new__(_Segment)
    with nogil:
        step = _shm_open_c(c_pid, c_fd, c_dev, c_ino, tok, &seg.fd, &seg.base, &seg.size, &err)
    if step != SHM_OK:
        field = ("fields 'pid' and 'fd'" if step <= SHM_STAT else "fields 'device' and 'inode'"
                 if step == SHM_INODE else "field 'token'" if step == SHM_TOKEN else "field 'fd'")
        why = f": {_os.strerror(err)}" if err else ""
        gone = (_SHM_NOFILE if err in (_errno.EMFILE, _errno.ENFILE) else
                " (this process may not read that one's descriptors: another user's or "
                "another PID namespace's process, or the sender exited and its pid is "
                "another's now, spec §11)"
                if err in (_errno.EACCES, _errno.EPERM) else
                " (the sending process exited or dropped every view of it: keep the sender "
                "alive until its pickles are loaded; or this process runs in another PID "
                "namespace than the sender's, a container: share by value there, spec §11)"
                if step <= SHM_INODE else
                "; the pickle is corrupt or forged")
        raise Refusal(f"pickle: {field} (pid {pid}, fd {fd}, device {dev}, inode {ino}): "
                      f"/proc/{pid}/fd/{fd} {_SHM_STEPS[step]}{why}{gone}")
    seg.token = token
    seg.readonly = (<_ShmHeader *>seg.base).readonly != 0
    _shm_seal(seg)
    seg.dev, seg.ino = dev, ino
    return _shm_same_token(_shm_map(seg), token)


cdef _Segment _shm_same_token(_Segment seg, bytes token):
    """seg, which this process maps already, if the pickle carries its token."""
    if seg.token != token:
        raise Refusal(f"pickle: field 'token' = {token.hex()} is not the token of the "
                      f"segment fields 'device' = {seg.dev} and 'inode' = {seg.ino} name; the "
                      "pickle is corrupt or forged")
    return seg


cdef uint64_t _shm_pickled(_Segment seg) except? 0:
    """A new pickle's serial; seg is kept alive here until that pickle was loaded once (by any
    process), or, past the header's serials, until this process ends."""
    cdef uint64_t serial = _shm_serial(seg.base)
    _shm_prune()
    entry = (seg, serial)
    with _shm_lock:
        if serial < SHM_SERIALS:
            _shm_pending.append(entry)
        else:
            _shm_kept.add(seg)
    return serial


cdef int _shm_prune() except -1:
    """Let go of the pickles that were loaded (at each share and pickle: no thread of its
    own); a segment goes with the last of its pickles and views. The list is taken whole, its
    entries still waiting put back: a share or pickle in between appends to the new list."""
    global _shm_pending
    cdef list fresh = [], taken
    with _shm_lock:
        taken = _shm_pending
        _shm_pending = fresh
    waiting = [e for e in taken if not _shm_marked((<_Segment>e[0]).base, e[1])]
    with _shm_lock:
        _shm_pending.extend(waiting)
    return 0                            # taken, with the loaded pickles' segments, goes here


cdef _Segment _shm_origin(DLPackObject self, int64_t *offset):
    """The segment self's elements lie in (self shared, unpickled from a handle, or a view
    whose bases lead to one), with the offset of its first element in the data; None if
    none holds them all."""
    base = self._base
    while isinstance(base, DLPackObject):
        base = (<DLPackObject>base)._base
    if type(base) is _Segment and _shm_offset(self, <_Segment>base, offset):
        return base
    return None


cdef _Segment _shm_holding(DLPackObject self, int64_t *offset):
    """The segment mapped in this process that self's elements lie in, whatever self's bases
    (a NumPy or torch view of shared data), found by address; None if none."""
    cdef _Segment seg
    with _shm_lock:
        refs = list(_shm_mapped.values())
    for ref in refs:
        seg = ref()
        if seg is not None and _shm_offset(self, seg, offset):
            return seg
    return None


cdef bint _shm_offset(DLPackObject self, _Segment seg, int64_t *offset) noexcept:
    """Whether self's elements lie in seg's data; offset: where the first one starts."""
    cdef int64_t lo = 0, hi = self.desc.layout.nbytes, start
    if self.desc.dl.device.device_type != kDLCPU:
        return False
    if self.desc.layout.count and not self.desc.layout.c_contig:
        _span(self, &lo, &hi)
    start = <int64_t>(<uintptr_t>self.desc.dl.data - <uintptr_t>seg.data())
    if start + lo < 0 or start + hi > <int64_t>(seg.size - SHM_HEAD):
        return False
    offset[0] = start
    return True


def share(obj, *, readonly=None):
    """A DLPackObject of ``obj`` (anything ``asdlpack`` takes, on the host) in memory other
    processes map: its pickle, in any protocol, is a handle of that memory, so a process it is
    sent to reads and writes the same bytes (spec §11). Data already in such a segment is used
    where it lies; anything else is copied in once (C order). ``readonly`` (default: the
    source's) makes the result read-only: new data is mapped copy-on-write in every process, so
    no process's write reaches another; a read-only view of a writable segment is read-only by
    its flag only."""
    cdef DLPackObject src = asdlpack(obj), r
    cdef _Segment seg
    cdef int64_t at = 0
    cdef int64_t small[STACK_DIMS]
    cdef int64_t *c_strides
    cdef DLTensor t
    cdef bint was_ro = src.desc.flags & FLAG_READ_ONLY, ro
    if readonly is None:
        ro = was_ro
    elif type(readonly) is bool:
        ro = readonly
    else:
        raise TypeError(f"share: readonly = {readonly!r:.80} is not a bool or None")
    if _shm_origin(src, &at) is not None and (ro or not was_ro):
        if ro == was_ro:
            return src
        r = _new_object()                   # a read-only view of the same segment
        r._describe_tensor(<const DLTensor *>&src.desc.dl, src.desc.flags | FLAG_READ_ONLY,
                           "share", -1, -1)
        _own_base(r, src)
        return r
    # Shared data another library's view reaches, used in place if the segment is writable: a
    # read-only one's pages here may have been written copy-on-write (torch ignores READ_ONLY,
    # and a view of torch's tensor may say read-only again) and differ from what another
    # process maps, so that is a copy.
    seg = _shm_holding(src, &at)
    if seg is not None and not seg.readonly and (ro or not was_ro):
        r = _new_object()
        r._describe_tensor(<const DLTensor *>&src.desc.dl, src.desc.flags
                           | (FLAG_READ_ONLY if ro else 0), "share", -1, -1)
        _own_base(r, seg)
        _keep_alive(r, src)
        return r
    if not _host_accessible(src.desc.dl.device.device_type):
        raise Refusal(f"share: the data is on {_device_name(src.desc.dl.device)}, which another "
                      "process cannot map; CUDA device memory pickles as a CUDA IPC handle "
                      "already (pickle asdlpack(x)), other devices' data: share a host copy, "
                      f"share(x.__dlpack__(dl_device=({kDLCPU}, 0), copy=True))")
    _host_wait(src)
    _shm_prune()
    seg = _shm_create(<uint64_t>src.desc.layout.nbytes, ro)
    _gather(seg.data(), <const char *>src.desc.dl.data, src)
    _shm_seal(seg)
    t = src.desc.dl
    t.data = seg.data()
    t.byte_offset = 0
    t.device.device_type = kDLCPU
    t.device.device_id = 0
    c_strides = _scratch(small, STACK_DIMS, t.ndim)
    if c_strides == NULL:
        raise MemoryError()
    try:
        _c_strides(t.ndim, t.shape, c_strides)
        t.strides = c_strides
        r = _new_object()
        r._describe_tensor(&t, (src.desc.flags & FLAG_SUBBYTE_PADDED)
                           | (FLAG_READ_ONLY if ro else 0), "share", 0,
                           src.desc.layout.nbytes)
    finally:
        _scratch_free(c_strides, small)
    _own_base(r, seg)
    return r
