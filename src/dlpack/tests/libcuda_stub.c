/* A stand-in for libcuda.so.1, loaded through pydlpack's real loader (dlopen + dlsym) on
 * machines without a GPU: every pointer is device memory of GPU 0, "device" memory is host
 * memory, and each entry point counts its calls. Also used to time pydlpack's own share of a
 * CUDA exchange (benchmarks/cuda_stub.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;

int stub_inits, stub_queries, stub_retains, stub_depth, stub_events, stub_records, stub_waits,
    stub_destroys, stub_syncs, stub_allocs, stub_frees, stub_copies;

int cuInit(unsigned flags) { (void)flags; stub_inits++; return 0; }

int cuGetErrorName(int rc, const char **name) { (void)rc; *name = "CUDA_ERROR_STUB"; return 0; }

int cuPointerGetAttributes(unsigned n, int *attrs, void **values, CUdeviceptr ptr) {
    (void)ptr;
    stub_queries++;
    for (unsigned i = 0; i < n; i++) {
        if (attrs[i] == 2) *(unsigned *)values[i] = 2;       /* CU_MEMORYTYPE_DEVICE */
        else if (attrs[i] == 9) *(int *)values[i] = 0;       /* ordinal */
        else if (attrs[i] == 8) *(unsigned *)values[i] = 0;  /* not managed */
        else return 1;
    }
    return 0;
}

int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }

int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    stub_retains++;
    *ctx = (void *)(uintptr_t)(0x1000 + dev);
    return 0;
}

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

int cuStreamSynchronize(void *stream) { (void)stream; stub_syncs++; return 0; }

int cuEventSynchronize(void *event) { (void)event; stub_syncs++; return 0; }

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
