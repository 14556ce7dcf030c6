/* A small C library speaking DLPack, for the ctypes tests: it makes tensors and owns them. */
#include <stdint.h>
#include <stdlib.h>

typedef struct { uint32_t major, minor; } Version;
typedef struct { int32_t device_type, device_id; } Device;
typedef struct { uint8_t code, bits; uint16_t lanes; } DType;
typedef struct {
    void *data; Device device; int32_t ndim; DType dtype;
    int64_t *shape, *strides; uint64_t byte_offset;
} Tensor;
typedef struct Legacy { Tensor t; void *ctx; void (*deleter)(struct Legacy *); } Legacy;
typedef struct Versioned {
    Version v; void *ctx; void (*deleter)(struct Versioned *); uint64_t flags; Tensor t;
} Versioned;

typedef struct { float values[64]; int64_t shape[1]; } Payload;

static int deleted = 0;
int deleted_count(void) { return deleted; }

static Payload *payload(int n) {
    Payload *p = malloc(sizeof(Payload));
    for (int i = 0; i < n && i < 64; i++) p->values[i] = (float)i;
    p->shape[0] = n;
    return p;
}
static void fill(Tensor *t, Payload *p) {
    t->data = p->values; t->device.device_type = 1; t->device.device_id = 0; t->ndim = 1;
    t->dtype.code = 2; t->dtype.bits = 32; t->dtype.lanes = 1;
    t->shape = p->shape; t->strides = NULL; t->byte_offset = 0;
}
static void delete_versioned(Versioned *m) { deleted++; free(m->ctx); free(m); }
static void delete_legacy(Legacy *m) { deleted++; free(m->ctx); free(m); }

Versioned *make_tensor(int n, uint32_t major, uint64_t flags) {
    Versioned *m = malloc(sizeof(Versioned));
    Payload *p = payload(n);
    m->v.major = major; m->v.minor = 0; m->ctx = p; m->deleter = delete_versioned;
    m->flags = flags;
    fill(&m->t, p);
    return m;
}

Legacy *make_legacy(int n) {
    Legacy *m = malloc(sizeof(Legacy));
    Payload *p = payload(n);
    m->ctx = p; m->deleter = delete_legacy;
    fill(&m->t, p);
    return m;
}

/* Takes ownership: sums a float32 or float64 1-D tensor, then calls its deleter once. */
double sum_and_free(Versioned *m) {
    double s = 0;
    Tensor *t = &m->t;
    for (int64_t i = 0; i < t->shape[0]; i++) {
        int64_t k = t->strides ? i * t->strides[0] : i;
        char *base = (char *)t->data + t->byte_offset;
        s += t->dtype.bits == 64 ? ((double *)base)[k] : ((float *)base)[k];
    }
    if (m->deleter) m->deleter(m);
    return s;
}

double sum_and_free_legacy(Legacy *m) {
    double s = 0;
    for (int64_t i = 0; i < m->t.shape[0]; i++) s += ((double *)m->t.data)[i];
    if (m->deleter) m->deleter(m);
    return s;
}
