/* covshim: atheris' coverage reaches its libFuzzer although libasan is preloaded.
 *
 * gcc's libasan defines the __sanitizer_cov_* callbacks (as no-ops) and, preloaded first, the
 * dynamic linker binds every caller to those: atheris' Python coverage then never reaches the
 * libFuzzer inside atheris' core (no coverage, no corpus growth). Preloaded before libasan,
 * this library defines them once more and forwards each call to the definition in atheris'
 * core (CORE, given at build time: fuzz/run.sh), found with dlsym on that library itself. All
 * these callbacks take at most four integer or pointer arguments and return nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

typedef void (*callback)(uintptr_t, uintptr_t, uintptr_t, uintptr_t);

static callback find(const char *name) {
    void *core = dlopen(CORE, RTLD_LAZY | RTLD_NOLOAD);     /* loaded by atheris, or not yet */
    return core ? (callback)dlsym(core, name) : 0;
}

#define FORWARD(name)                                                               \
    void name(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d) {                 \
        static callback f;                                                          \
        if (!f)                                                                     \
            f = find(#name);                                                        \
        if (f)                                                                      \
            f(a, b, c, d);                                                          \
    }

FORWARD(__sanitizer_cov_8bit_counters_init)
FORWARD(__sanitizer_cov_pcs_init)
FORWARD(__sanitizer_cov_trace_cmp1)
FORWARD(__sanitizer_cov_trace_cmp2)
FORWARD(__sanitizer_cov_trace_cmp4)
FORWARD(__sanitizer_cov_trace_cmp8)
FORWARD(__sanitizer_cov_trace_const_cmp1)
FORWARD(__sanitizer_cov_trace_const_cmp2)
FORWARD(__sanitizer_cov_trace_const_cmp4)
FORWARD(__sanitizer_cov_trace_const_cmp8)
FORWARD(__sanitizer_cov_trace_div4)
FORWARD(__sanitizer_cov_trace_div8)
FORWARD(__sanitizer_cov_trace_gep)
FORWARD(__sanitizer_cov_trace_switch)
FORWARD(__sanitizer_cov_trace_pc_indir)
