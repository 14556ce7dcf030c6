# The copy routine (docs/spec.md §8): the one place that allocates host copies and copies an
# array's elements into C order. Every copy pydlpack makes goes through it: the private copy of
# read-only data for a legacy consumer, copy=True, host copies of device data (the gather from
# their staging buffer), staging for host -> device copies, and the copy a sparse view pickles as.


cdef extern from *:
    """
    #include <sys/mman.h>
    #include <unistd.h>
    /* Ask for transparent huge pages over an allocation's whole pages, as NumPy does: a fresh
       copy's first touch then faults 2 MiB at a time, not 4 KiB (about half a large copy's
       time went to 4 KiB faults). Advice only: a kernel without THP ignores it. */
    static void dlpk_advise_huge(void *p, size_t n) {
    #ifdef MADV_HUGEPAGE
        long page = sysconf(_SC_PAGESIZE);
        uintptr_t lo, hi;
        if (page <= 0) return;
        lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        hi = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    """
    void _advise_huge "dlpk_advise_huge"(void *p, size_t n) nogil


cdef extern from *:
    """
    /* Every other item of 1, 2, 4 or 8 bytes into a compact run ([:, ::2], the real parts of
       complex data): a constant stride the compiler vectorises (GCC at -O3 only; about 3x the
       generic loop for 1- and 2-byte items, which is bound by its per-item work). */
    #if defined(__GNUC__) && !defined(__clang__)
    #define DLPK_VECTORIZE __attribute__((optimize("O3")))
    #else
    #define DLPK_VECTORIZE
    #endif
    #define DLPK_HALF(N)                                                                    \
        static DLPK_VECTORIZE void dlpk_half_##N(char *restrict d, const char *restrict s,  \
                                                  int64_t n) {                             \
            for (int64_t i = 0; i < n; i++) memcpy(d + i * N, s + 2 * i * N, N);           \
        }
    DLPK_HALF(1)
    DLPK_HALF(2)
    DLPK_HALF(4)
    DLPK_HALF(8)
    """
    void _half1 "dlpk_half_1"(char *d, const char *s, int64_t n) nogil
    void _half2 "dlpk_half_2"(char *d, const char *s, int64_t n) nogil
    void _half4 "dlpk_half_4"(char *d, const char *s, int64_t n) nogil
    void _half8 "dlpk_half_8"(char *d, const char *s, int64_t n) nogil


cdef enum:
    HUGE_BYTES = 4 << 20        # allocations this large are advised for huge pages (as NumPy's)
    HUGE_PAGE = 2 << 20         # ...and aligned to one (x86-64's and 4 KiB-page arm64's size)
    NOGIL_BYTES = 1 << 20       # copies this large run without the GIL
    TICK_BYTES = 32 << 20       # ...and take it back to check for signals after this many bytes
    TILE_BYTES = 256            # a transposing copy moves tiles this many bytes wide and high
    PLAN_ROWS = 5               # a copy's plan (_Plan): this many arrays of ndim int64


cdef void *_alloc_copy(size_t size) noexcept nogil:
    """malloc for a buffer a copy fills at once (NULL when out of memory); free() frees it.
    A large one starts on a huge-page boundary, so that its first bytes get one too."""
    cdef void *p = NULL
    if size < HUGE_BYTES:
        return malloc(size)
    if posix_memalign(&p, HUGE_PAGE, size) != 0:
        return NULL
    _advise_huge(p, size)
    return p


cdef struct _Item16:
    uint64_t word[2]

ctypedef fused _item:
    uint8_t
    uint16_t
    uint32_t
    uint64_t
    _Item16


cdef inline void _run_of(const _item *kind, char *d, const char *s, int64_t n, int64_t ds,
                         int64_t ss) noexcept nogil:
    """n items of sizeof(_item) bytes, s to d: fixed-size memcpy compiles to one move (any
    alignment); a compact destination is indexed so the compiler knows its stride."""
    cdef int64_t i
    if ds == sizeof(_item):
        for i in range(n):
            memcpy(d + i * sizeof(_item), s, sizeof(_item))
            s += ss
    else:
        for i in range(n):
            memcpy(d, s, sizeof(_item))
            d += ds
            s += ss


cdef void _run(char *d, const char *s, int64_t n, int64_t ds, int64_t ss,
               int64_t isz) noexcept nogil:
    """Copy n items of isz bytes from s to d, the byte strides ss and ds apart."""
    cdef int64_t i
    if ds == isz and ss == isz:
        memcpy(d, s, <size_t>(n * isz))
    elif ds == isz and ss == 2 * isz and isz <= 8 and (isz & (isz - 1)) == 0:
        if isz == 1:
            _half1(d, s, n)
        elif isz == 2:
            _half2(d, s, n)
        elif isz == 4:
            _half4(d, s, n)
        else:
            _half8(d, s, n)
    elif isz == 8:
        _run_of(<const uint64_t *>NULL, d, s, n, ds, ss)
    elif isz == 4:
        _run_of(<const uint32_t *>NULL, d, s, n, ds, ss)
    elif isz == 1:
        _run_of(<const uint8_t *>NULL, d, s, n, ds, ss)
    elif isz == 2:
        _run_of(<const uint16_t *>NULL, d, s, n, ds, ss)
    elif isz == 16:
        _run_of(<const _Item16 *>NULL, d, s, n, ds, ss)
    else:
        for i in range(n):
            memcpy(d, s, <size_t>isz)
            d += ds
            s += ss


cdef struct _Plan:
    # A copy's dimensions once those of extent 1 are dropped and neighbours that step through
    # the source as one are merged: extents, source and (C-order) destination byte strides;
    # and _walk's odometer (the outer dimensions and their indices). Each points into the
    # caller's scratch of PLAN_ROWS * ndim int64 (_scratch: the C stack for a few dimensions).
    int n
    int64_t isz
    int64_t *extent
    int64_t *src
    int64_t *dst
    int64_t *outer
    int64_t *idx


cdef void _plan(_Plan *p, int64_t *scratch, int ndim, const int64_t *shape,
                const int64_t *strides, int64_t isz) noexcept nogil:
    """The plan of a non-empty array (element strides; _validate bounded every step), in
    scratch (PLAN_ROWS * ndim int64)."""
    cdef int i, n = 0
    cdef int64_t size = isz, reach
    p.isz = isz
    p.extent = scratch
    p.src = scratch + ndim
    p.dst = scratch + 2 * ndim
    p.outer = scratch + 3 * ndim
    p.idx = scratch + 4 * ndim
    for i in range(ndim):
        if shape[i] == 1:
            continue
        if (n > 0 and not _mul_ovf(strides[i] * isz, shape[i], &reach)
                and p.src[n - 1] == reach):
            p.extent[n - 1] *= shape[i]         # the outer dimension continues this one
            p.src[n - 1] = strides[i] * isz
        else:
            p.extent[n] = shape[i]
            p.src[n] = strides[i] * isz
            n += 1
    p.n = n
    for i in range(n - 1, -1, -1):
        p.dst[i] = size
        size *= p.extent[i]


cdef inline int _tick(int64_t *moved, int64_t nbytes, PyThreadState **released) noexcept nogil:
    """Count bytes copied. A large copy on the main thread (the one that runs signal handlers)
    takes the GIL back every TICK_BYTES to run them: -1 when one raised (Ctrl-C; its error is
    set, the GIL released again). By hand, not `with gil`: PyGILState is wrong in
    subinterpreters."""
    cdef int failed
    moved[0] += nbytes
    if released[0] == NULL or moved[0] < TICK_BYTES:
        return 0
    moved[0] = 0
    PyEval_RestoreThread(released[0])
    failed = _run_signal_handlers()
    released[0] = PyEval_SaveThread()
    return failed


cdef inline int64_t _magnitude(int64_t x) noexcept nogil:
    return -x if x < 0 else x


cdef int _walk(const _Plan *p, char *dst, const char *src,
               PyThreadState **released) noexcept nogil:
    """Copy by the plan: the destination's innermost dimension in runs (one memcpy when the
    source is contiguous there too); when another dimension steps through the source more
    closely, that pair in square tiles (a transpose reads and writes whole cache lines); the
    other dimensions by an odometer, in the destination's order. -1: a signal handler raised.
    The plan's values are read into locals once: a copy's stores may alias them."""
    cdef int i, m = 0, k = p.n - 1, j = -1
    cdef const int64_t *extent = p.extent
    cdef const int64_t *sstep = p.src
    cdef const int64_t *dstep = p.dst
    cdef int64_t *outer = p.outer
    cdef int64_t *idx = p.idx
    cdef int64_t moved = 0, isz = p.isz, side, r, c, rows, cols, at, piece
    cdef int64_t ek, dk, sk, ej = 0, dj = 0, sj = 0
    cdef char *d = dst
    cdef const char *s = src
    if p.n == 0:                             # a 0-d array, or every extent 1
        memcpy(dst, src, <size_t>isz)
        return 0
    for i in range(k):
        if _magnitude(sstep[i]) < _magnitude(sstep[k]) and (
                j < 0 or _magnitude(sstep[i]) < _magnitude(sstep[j])):
            j = i
    for i in range(k):
        if i != j:
            outer[m] = i
            idx[m] = 0
            m += 1
    ek, dk, sk = extent[k], dstep[k], sstep[k]
    if j >= 0:
        ej, dj, sj = extent[j], dstep[j], sstep[j]
    side = TILE_BYTES // isz if isz < TILE_BYTES // 8 else 8
    piece = TICK_BYTES // isz if isz < TICK_BYTES else 1
    while True:
        if j < 0:                           # runs, in pieces that keep Ctrl-C responsive
            at = 0
            while at < ek:
                c = min(piece, ek - at)
                _run(d + at * dk, s + at * sk, c, dk, sk, isz)
                if _tick(&moved, c * isz, released):
                    return -1
                at += c
        else:
            r = 0
            while r < ej:
                rows = min(side, ej - r)
                c = 0
                while c < ek:
                    cols = min(side, ek - c)
                    for at in range(r, r + rows):
                        _run(d + at * dj + c * dk, s + at * sj + c * sk, cols, dk, sk, isz)
                    if _tick(&moved, rows * cols * isz, released):
                        return -1
                    c += cols
                r += rows
        i = m - 1
        while i >= 0:                       # odometer over the outer dimensions
            if idx[i] + 1 < extent[outer[i]]:
                idx[i] += 1
                d += dstep[outer[i]]
                s += sstep[outer[i]]
                break
            d -= (extent[outer[i]] - 1) * dstep[outer[i]]
            s -= (extent[outer[i]] - 1) * sstep[outer[i]]
            idx[i] = 0
            i -= 1
        if i < 0:
            return 0


cdef int _gather(char *dst, const char *data, DLPackObject src,
                 const int64_t *strides=NULL) except -1:
    """Copy src's elements, addressed from data with src's strides (or the element strides
    given, e.g. a staging copy's), into dst in C order; large copies without the GIL.

    Packed sub-byte arrays are always C-contiguous (_validate refuses others): copied as their
    nbytes. Others move whole items of src.desc.layout.itemsize bytes.
    """
    cdef _Plan p
    cdef int64_t small[PLAN_ROWS * STACK_DIMS]
    cdef int64_t *scratch
    cdef int64_t one = 1, nbytes = src.desc.layout.nbytes
    cdef int failed = 0, ndim = src.desc.dl.ndim
    cdef bint flat = strides == NULL and src.desc.layout.c_contig, on_main = False
    cdef PyThreadState *released = NULL
    if src.desc.layout.count == 0:
        return 0
    if flat and nbytes < NOGIL_BYTES:
        memcpy(dst, data, <size_t>nbytes)       # what the plan of this one run does
        return 0
    if nbytes >= NOGIL_BYTES:       # asked first: nothing raises while scratch is held
        on_main = PyThread_get_thread_ident() == _threading.main_thread().ident
    if flat:
        ndim = 1
    scratch = _scratch(small, PLAN_ROWS * STACK_DIMS, PLAN_ROWS * ndim)
    if scratch == NULL:
        raise MemoryError(f"cannot allocate the plan of a copy of {ndim} dimensions")
    if flat:
        _plan(&p, scratch, 1, &nbytes, &one, 1)
    else:
        _plan(&p, scratch, ndim, src.desc.dl.shape,
              <const int64_t *>src.desc.dl.strides if strides == NULL else strides,
              src.desc.layout.itemsize)
    if nbytes < NOGIL_BYTES:
        failed = _walk(&p, dst, data, &released)
    elif not on_main:
        with nogil:                 # no signal handlers run here: nothing to check
            _walk(&p, dst, data, &released)
    else:
        released = PyEval_SaveThread()
        failed = _walk(&p, dst, data, &released)
        PyEval_RestoreThread(released)
    _scratch_free(scratch, small)
    return failed                   # -1 with a signal handler's error set
