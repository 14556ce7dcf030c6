#!/usr/bin/env bash
# Sanitizer job (docs/spec.md §7: bad input never crashes the interpreter): the extension
# built with AddressSanitizer and UBSan, then the stdlib + NumPy + ctypes parts of the suite
# and the hostile corpus run under it, then the coverage-guided fuzz harnesses (fuzz/run.sh:
# atheris, each parser and struct reader for 12 s from its seed corpus). Any report, in pytest
# itself, in one of the corpus's child interpreters or in a harness, fails the job: reports go
# to log files (children inherit the environment), and the job goes red when one exists; so
# does a harness's finding.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

venv=/tmp/pydlpack-asan-venv
logs=/tmp/pydlpack-asan-logs
rm -rf "$venv" "$logs"
mkdir -p "$logs"
python3 -m venv "$venv"
. "$venv/bin/activate"
python -m pip install -q --upgrade pip
# No torch, JAX or TensorFlow: their own native code is not ours to sanitize.
python -m pip install -q numpy pytest hypothesis cython "setuptools>=77" wheel

CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
LDFLAGS="-fsanitize=address,undefined" \
    python -m pip install -q --no-build-isolation --no-cache-dir .

asan_rt=$(gcc -print-file-name=libasan.so)
# Run from an empty directory outside the checkout, so the sanitized installed build is what
# gets imported.
# RSS/leak-growth tests are left out: ASan's quarantine holds freed memory by design.
# allocator_may_return_null: sizes no machine has (2**61 bytes) must give NULL -> MemoryError,
# the path the corpus checks, instead of ASan's "allocation-size-too-big" abort.
status=0
# Deselected: the checker's test that probes a lying producer's bitmap past its allocation
# with write(2) (EFAULT where unmapped): ASan's write interceptor reports that probe, by design.
(
    cd "$(mktemp -d)"         # an empty directory: nothing there shadows a module (/tmp/ray…)
    LD_PRELOAD="$asan_rt" PYTHONMALLOC=malloc \
    ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$logs/asan" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan" \
        python -m pytest -q -p no:cacheprovider --pyargs dlpack.tests \
            -k "not leak and not no_growth and not bitmap_past_the_memory"
) || status=$?

# The fuzz harnesses on this build. atheris ships its own libFuzzer; fuzz/run.sh preloads
# libasan for each harness (FUZZ_ASAN_RUNTIME), behind a shim that keeps atheris' coverage
# going to that libFuzzer (fuzz/covshim.c says why). About 2 minutes in all.
python -m pip install -q atheris
PYTHONMALLOC=malloc FUZZ_ASAN_RUNTIME="$asan_rt" PYTHON=python \
ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$logs/asan" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan" \
    bash fuzz/run.sh 12 || status=$?

# A report is an ASan/UBSan error or summary; ASan's warnings (a NULL from an allocation too
# big, as asked for above) are not.
reports=$(grep -lE "ERROR: |SUMMARY: |runtime error:" "$logs"/* 2>/dev/null || true)
if [ -n "$reports" ]; then
    echo "sanitizer reports:" >&2
    for f in $reports; do
        echo "== $f" >&2
        cat "$f" >&2
    done
    status=1
fi
echo "sanitizer job: exit $status, wall time $((SECONDS - start)) s"
exit "$status"
