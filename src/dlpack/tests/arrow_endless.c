/* An ArrowArrayStream that never ends: every get_next hands out an empty float32 chunk (a
   producer that waits on a source forever). asdlpack must stay interruptible on it. */
#include <stdint.h>
#include <string.h>

struct ArrowSchema {
    const char *format, *name, *metadata; int64_t flags, n_children;
    struct ArrowSchema **children, *dictionary;
    void (*release)(struct ArrowSchema *); void *private_data;
};
struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers; struct ArrowArray **children, *dictionary;
    void (*release)(struct ArrowArray *); void *private_data;
};
struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *); void *private_data;
};

static const void *no_buffers[2] = {0, 0};
static void schema_release(struct ArrowSchema *s) { s->release = 0; }
static void array_release(struct ArrowArray *a) { a->release = 0; }

static int get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
    (void)st;
    memset(out, 0, sizeof *out);
    out->format = "f";
    out->name = "";
    out->release = schema_release;
    return 0;
}

static int get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
    (void)st;
    memset(out, 0, sizeof *out);
    out->n_buffers = 2;
    out->buffers = no_buffers;
    out->release = array_release;
    return 0;
}

static const char *last_error(struct ArrowArrayStream *st) { (void)st; return 0; }
static void stream_release(struct ArrowArrayStream *st) { st->release = 0; }

void endless_stream(struct ArrowArrayStream *st) {
    st->get_schema = get_schema;
    st->get_next = get_next;
    st->get_last_error = last_error;
    st->release = stream_release;
    st->private_data = 0;
}
