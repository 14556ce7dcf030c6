/* Consumers that call a DLManagedTensorVersioned's deleter where Python is not looking: from a
   thread Python never saw, while the interpreter finalizes, and after it has (an atexit
   handler). Only the struct's prefix up to the deleter is read: it is the same in every 1.x. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct Versioned {
    uint32_t major, minor; void *ctx; void (*deleter)(struct Versioned *);
} Versioned;

static void *run_deleter(void *m) {
    ((Versioned *)m)->deleter((Versioned *)m);
    return NULL;
}

/* Calls the deleter on a new C thread and waits for it; 0 when the thread ran. */
int delete_in_c_thread(Versioned *m) {
    pthread_t t;
    if (pthread_create(&t, NULL, run_deleter, m) != 0) return -1;
    return pthread_join(t, NULL);
}

static Versioned *at_exit_tensor;
static void run_at_exit(void) { run_deleter(at_exit_tensor); }

/* Calls the deleter from an atexit handler: after Py_FinalizeEx has returned. */
int delete_at_exit(Versioned *m) {
    at_exit_tensor = m;
    return atexit(run_at_exit);
}

static Versioned *late_tensor;
static int (*late_is_initialized)(void);

static void *run_late(void *unused) {
    (void)unused;
    while (late_is_initialized()) usleep(100);     /* a flag read: no GIL needed */
    return run_deleter(late_tensor);
}

/* Starts a C thread that calls the deleter once is_initialized (Py_IsInitialized) answers 0,
   that is while the interpreter finalizes (or after). */
int delete_during_shutdown(Versioned *m, int (*is_initialized)(void)) {
    pthread_t t;
    late_tensor = m;
    late_is_initialized = is_initialized;
    if (pthread_create(&t, NULL, run_late, NULL) != 0) return -1;
    return pthread_detach(t);
}
