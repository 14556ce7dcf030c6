/* A stand-in for libcuda.so.1, loaded through pydlpack's real loader (dlopen + dlsym) on
 * machines without a GPU: every pointer is device memory of GPU 0, every stream belongs to its
 * primary context, "device" memory is host memory, copies are immediate, and each entry point
 * counts its calls. Also used to time pydlpack's own share of a CUDA exchange
 * (benchmarks/cuda_stub.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;

int stub_inits, stub_queries, stub_retains, stub_depth, stub_events, stub_records, stub_waits,
    stub_destroys, stub_syncs, stub_allocs, stub_frees, stub_copies, stub_lookups;

typedef struct {
    size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice;
    void *srcArray; size_t srcPitch;
    size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice;
    void *dstArray; size_t dstPitch;
    size_t WidthInBytes, Height;
} Memcpy2D;

#define PRIMARY ((void *)(uintptr_t)0x1000)

int cuInit(unsigned flags) { (void)flags; stub_inits++; return 0; }

int cuGetErrorName(int rc, const char **name) { (void)rc; *name = "CUDA_ERROR_STUB"; return 0; }

int cuCtxGetCurrent(void **ctx) { *ctx = stub_depth > 0 ? PRIMARY : NULL; return 0; }

int cuPointerGetAttributes(unsigned n, int *attrs, void **values, CUdeviceptr ptr) {
    stub_queries++;
    if (stub_depth == 0) return 201;                         /* needs a current context */
    for (unsigned i = 0; i < n; i++) {
        if (attrs[i] == 2) *(unsigned *)values[i] = 2;       /* CU_MEMORYTYPE_DEVICE */
        else if (attrs[i] == 9) *(int *)values[i] = 0;       /* ordinal */
        else if (attrs[i] == 8) *(unsigned *)values[i] = 0;  /* not managed */
        else if (attrs[i] == 4) *(void **)values[i] = NULL;  /* no host pointer */
        else if (attrs[i] == 1) *(void **)values[i] = PRIMARY;  /* GPU 0's primary context */
        else if (attrs[i] == 7) *(unsigned long long *)values[i] = ptr; /* buffer ID */
        else return 1;
    }
    return 0;
}

int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }

int cuDeviceGetCount(int *count) { *count = 1; return 0; }

int cuDeviceGetAttribute(int *value, int attribute, int dev) {
    (void)dev;
    if (attribute != 11) return 1;                           /* CU_DEVICE_ATTRIBUTE_MAX_PITCH */
    *value = 0x7fffffff;
    return 0;
}

int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    stub_retains++;
    *ctx = (void *)(uintptr_t)(0x1000 + dev);           /* GPU 0's is PRIMARY */
    return 0;
}

int cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) {
    (void)dev;
    *flags = 0;
    *active = stub_retains > 0;
    return 0;
}

int cuStreamGetCtx(void *stream, void **ctx) { (void)stream; stub_lookups++; *ctx = PRIMARY; return 0; }

int cuCtxPushCurrent_v2(void *ctx) { (void)ctx; stub_depth++; return 0; }

int cuCtxPopCurrent_v2(void **ctx) { *ctx = NULL; stub_depth--; return 0; }

int cuEventCreate(void **event, unsigned flags) {
    (void)flags;
    stub_events++;
    *event = (void *)(uintptr_t)0xE0;
    return stub_depth > 0 ? 0 : 201;                        /* needs a current context */
}

int cuEventRecord(void *event, void *stream) { (void)event; (void)stream; stub_records++; return 0; }

int cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
    (void)stream; (void)event; (void)flags;
    stub_waits++;
    return 0;
}

int cuEventDestroy_v2(void *event) { (void)event; stub_destroys++; return 0; }

int cuStreamIsCapturing(void *stream, int *status) { (void)stream; *status = 0; return 0; }

int cuStreamSynchronize(void *stream) { (void)stream; stub_syncs++; return 0; }

int cuEventSynchronize(void *event) { (void)event; stub_syncs++; return 0; }

int cuCtxSynchronize(void) { stub_syncs++; return 0; }

int cuMemAlloc_v2(CUdeviceptr *ptr, size_t n) {
    void *p = malloc(n);
    if (p == NULL) return 2;                                 /* CUDA_ERROR_OUT_OF_MEMORY */
    stub_allocs++;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return 0;
}

int cuMemFree_v2(CUdeviceptr ptr) { stub_frees++; free((void *)(uintptr_t)ptr); return 0; }

int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    stub_copies++;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}

int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    stub_copies++;
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}

int cuMemcpy2D_v2(const Memcpy2D *c) {
    stub_copies++;
    for (size_t r = 0; r < c->Height; r++)
        memcpy((char *)c->dstHost + r * c->dstPitch,
               (const char *)(uintptr_t)c->srcDevice + r * c->srcPitch, c->WidthInBytes);
    return 0;
}

typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD; int srcMemoryType; const void *srcHost;
    CUdeviceptr srcDevice; void *srcArray, *reserved0; size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD; int dstMemoryType; void *dstHost;
    CUdeviceptr dstDevice; void *dstArray, *reserved1; size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} Memcpy3D;

int cuMemcpy3D_v2(const Memcpy3D *c) {
    stub_copies++;
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t r = 0; r < c->Height; r++)
            memcpy((char *)c->dstHost + (z * c->dstHeight + r) * c->dstPitch,
                   (const char *)(uintptr_t)c->srcDevice + (z * c->srcHeight + r) * c->srcPitch,
                   c->WidthInBytes);
    return 0;
}

int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
    (void)stream;
    stub_copies++;
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return 0;
}
