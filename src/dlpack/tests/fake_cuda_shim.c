/* The C face of the fake CUDA driver (tests/fake_cuda.py): one function per driver entry point,
 * with libcuda's signature, that notes whether its caller held the GIL and then calls the fake's
 * Python implementation. A ctypes callback cannot tell (it takes the GIL itself), and a call that
 * blocks while its caller holds the GIL is the hang the fake must show. */
#include <stddef.h>
#include <string.h>
#include <time.h>

typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char reserved[64]; } IpcHandle;   /* CUipcMemHandle, CUipcEventHandle */

static int (*gil_check)(void);         /* PyGILState_Check, handed over by shim_init */
static __thread int caller_held_gil;   /* set by the entry point running on this thread */

void shim_init(void *check) { gil_check = (int (*)(void))check; }

int shim_caller_held_gil(void) { return caller_held_gil; }

/* Wait, without giving the GIL up, until *flag differs from seen or ms have passed; returns
 * whether it changed. Called through ctypes.PyDLL, it stalls every other Python thread (which
 * alone could change the flag) as a driver call blocking under the GIL does. */
int shim_wait_holding_gil(volatile int *flag, int seen, int ms) {
    struct timespec tick = {0, 1000000L};
    for (int waited = 0; *flag == seen && waited < ms; waited++)
        nanosleep(&tick, NULL);
    return *flag != seen;
}

#define ENTRY(name, params, args)                                   \
    static int (*py_##name) params;                                 \
    int shim_##name params {                                        \
        caller_held_gil = gil_check != NULL && gil_check();         \
        return py_##name args;                                      \
    }

ENTRY(cuInit, (unsigned a), (a))
ENTRY(cuGetErrorName, (int a, const char **b), (a, b))
ENTRY(cuCtxGetCurrent, (void **a), (a))
ENTRY(cuPointerGetAttributes, (unsigned a, int *b, void **c, CUdeviceptr d), (a, b, c, d))
ENTRY(cuDeviceGet, (int *a, int b), (a, b))
ENTRY(cuDeviceGetCount, (int *a), (a))
ENTRY(cuDeviceGetAttribute, (int *a, int b, int c), (a, b, c))
ENTRY(cuDevicePrimaryCtxRetain, (void **a, int b), (a, b))
ENTRY(cuDevicePrimaryCtxGetState, (int a, unsigned *b, int *c), (a, b, c))
ENTRY(cuCtxPushCurrent_v2, (void *a), (a))
ENTRY(cuCtxPopCurrent_v2, (void **a), (a))
ENTRY(cuStreamGetCtx, (void *a, void **b), (a, b))
ENTRY(cuEventCreate, (void **a, unsigned b), (a, b))
ENTRY(cuEventRecord, (void *a, void *b), (a, b))
ENTRY(cuStreamWaitEvent, (void *a, void *b, unsigned c), (a, b, c))
ENTRY(cuEventDestroy_v2, (void *a), (a))
ENTRY(cuStreamSynchronize, (void *a), (a))
ENTRY(cuEventSynchronize, (void *a), (a))
ENTRY(cuCtxSynchronize, (void), ())
ENTRY(cuMemcpy3D_v2, (const void *a), (a))
ENTRY(cuMemAlloc_v2, (CUdeviceptr *a, size_t b), (a, b))
ENTRY(cuMemFree_v2, (CUdeviceptr a), (a))
ENTRY(cuMemcpyDtoH_v2, (void *a, CUdeviceptr b, size_t c), (a, b, c))
ENTRY(cuMemcpyHtoD_v2, (CUdeviceptr a, const void *b, size_t c), (a, b, c))
ENTRY(cuMemcpy2D_v2, (const void *a), (a))
ENTRY(cuMemcpyDtoDAsync_v2, (CUdeviceptr a, CUdeviceptr b, size_t c, void *d), (a, b, c, d))
ENTRY(cuMemGetAddressRange_v2, (CUdeviceptr *a, size_t *b, CUdeviceptr c), (a, b, c))
ENTRY(cuIpcGetMemHandle, (IpcHandle *a, CUdeviceptr b), (a, b))
ENTRY(cuIpcCloseMemHandle, (CUdeviceptr a), (a))
ENTRY(cuIpcGetEventHandle, (IpcHandle *a, void *b), (a, b))
ENTRY(cuDeviceGetUuid_v2, (unsigned char *a, int b), (a, b))
ENTRY(cuMemHostAlloc, (void **a, size_t b, unsigned c), (a, b, c))
ENTRY(cuMemFreeHost, (void *a), (a))
ENTRY(cuMemAllocManaged, (CUdeviceptr *a, size_t b, unsigned c), (a, b, c))
ENTRY(cuStreamBeginCapture_v2, (void *a, int b), (a, b))
ENTRY(cuStreamEndCapture, (void *a, void **b), (a, b))
ENTRY(cuStreamIsCapturing, (void *a, int *b), (a, b))
ENTRY(cuMemAllocAsync, (CUdeviceptr *a, size_t b, void *c), (a, b, c))
ENTRY(cuMemFreeAsync, (CUdeviceptr a, void *b), (a, b))
ENTRY(cuMemcpyHtoDAsync_v2, (CUdeviceptr a, const void *b, size_t c, void *d), (a, b, c, d))

/* The handles libcuda takes by value reach Python by address (a ctypes callback's by-value
 * structure arguments are not portable). */
#define BY_VALUE(name, params, pyparams, args)                      \
    static int (*py_##name) pyparams;                               \
    int shim_##name params {                                        \
        caller_held_gil = gil_check != NULL && gil_check();         \
        return py_##name args;                                      \
    }

BY_VALUE(cuIpcOpenMemHandle_v2, (CUdeviceptr *a, IpcHandle b, unsigned c),
         (CUdeviceptr *, IpcHandle *, unsigned), (a, &b, c))
BY_VALUE(cuIpcOpenEventHandle, (void **a, IpcHandle b), (void **, IpcHandle *), (a, &b))

#define SLOT(name) \
    if (strcmp(entry, #name) == 0) { *(void **)&py_##name = fn; return (void *)shim_##name; }

/* Route entry point `entry` to the Python callback `fn`; returns the C entry point to install. */
void *shim_route(const char *entry, void *fn) {
    SLOT(cuInit) SLOT(cuGetErrorName) SLOT(cuCtxGetCurrent) SLOT(cuPointerGetAttributes)
    SLOT(cuDeviceGet) SLOT(cuDeviceGetCount) SLOT(cuDeviceGetAttribute) SLOT(cuDevicePrimaryCtxRetain)
    SLOT(cuDevicePrimaryCtxGetState) SLOT(cuCtxPushCurrent_v2) SLOT(cuCtxPopCurrent_v2)
    SLOT(cuStreamGetCtx) SLOT(cuEventCreate) SLOT(cuEventRecord) SLOT(cuStreamWaitEvent)
    SLOT(cuEventDestroy_v2) SLOT(cuStreamSynchronize) SLOT(cuEventSynchronize) SLOT(cuCtxSynchronize) SLOT(cuMemcpy3D_v2) SLOT(cuMemAlloc_v2) SLOT(cuMemFree_v2)
    SLOT(cuMemcpyDtoH_v2) SLOT(cuMemcpyHtoD_v2) SLOT(cuMemcpy2D_v2) SLOT(cuMemcpyDtoDAsync_v2)
    SLOT(cuMemGetAddressRange_v2) SLOT(cuIpcGetMemHandle) SLOT(cuIpcCloseMemHandle)
    SLOT(cuIpcGetEventHandle) SLOT(cuDeviceGetUuid_v2) SLOT(cuIpcOpenMemHandle_v2)
    SLOT(cuIpcOpenEventHandle) SLOT(cuMemHostAlloc) SLOT(cuMemFreeHost) SLOT(cuMemAllocManaged)
    SLOT(cuStreamBeginCapture_v2) SLOT(cuStreamEndCapture) SLOT(cuStreamIsCapturing)
    SLOT(cuMemAllocAsync) SLOT(cuMemFreeAsync) SLOT(cuMemcpyHtoDAsync_v2)
    return NULL;
}
