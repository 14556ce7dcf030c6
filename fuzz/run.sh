#!/usr/bin/env bash
# Run each atheris harness (fuzz/fuzz_*.py) for a bounded time from its seed corpus
# (fuzz/corpus/NAME/, read only: new inputs go to a scratch directory) and fail on any finding:
# an escaped exception, a broken check, a crash, a hang, a sanitizer report.
#   fuzz/run.sh [SECONDS_PER_HARNESS [HARNESS...]]     PYTHON=... picks the interpreter
# The interpreter needs atheris and dlpack importable. For a sanitized dlpack (.ci/sanitize.sh)
# set FUZZ_ASAN_RUNTIME to gcc's libasan.so: each harness then runs with it preloaded, after
# fuzz/covshim.c (which hands atheris' coverage back to its libFuzzer: libasan's own no-op
# coverage callbacks would win otherwise), and verify_asan_link_order=0 added to ASAN_OPTIONS
# (the shim comes first; it defines no function libasan intercepts). The input of a finding is
# left in the scratch directory (printed); replay it with: python fuzz/fuzz_NAME.py FILE
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
secs=${1:-12}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(buffer typestr array_interface array_struct dlpack
                                        arrow pickle)
python=${PYTHON:-python}
work=$(mktemp -d /tmp/pydlpack-fuzz.XXXXXX)
# The buffer harness's exporter (a C type), built for this interpreter.
read -r include suffix < <("$python" -c "import sysconfig as s; \
print(s.get_paths()['include'], s.get_config_var('EXT_SUFFIX'))")
"${CC:-gcc}" -shared -fPIC -O1 -g -I"$include" "$here/fuzzbuf.c" -o "$work/fuzzbuf$suffix"
export FUZZBUF_DIR=$work
preload=()
if [ -n "${FUZZ_ASAN_RUNTIME:-}" ]; then
    core=$("$python" -c "import atheris, glob, os; \
print(glob.glob(os.path.join(os.path.dirname(atheris.__file__), 'core_with_libfuzzer*.so'))[0])")
    "${CC:-gcc}" -shared -fPIC -O2 -DCORE="\"$core\"" "$here/covshim.c" -o "$work/covshim.so" -ldl
    preload=(env "LD_PRELOAD=$work/covshim.so $FUZZ_ASAN_RUNTIME"
             "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0")
fi
status=0
for h in "${harnesses[@]}"; do
    name=fuzz_$h
    mkdir -p "$work/corpus-$h" "$work/found-$h"
    args=(-max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
          -artifact_prefix="$work/found-$h/")
    [ -f "$here/$name.dict" ] && args+=(-dict="$here/$name.dict")
    rc=0
    (cd "$work" && "${preload[@]}" "$python" "$here/$name.py" "${args[@]}" "$work/corpus-$h" \
        "$here/corpus/$name") > "$work/$h.log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$h.log")
    corpus=$(find "$work/corpus-$h" -type f | wc -l)
    echo "$name: ${execs:-?} inputs in ${secs} s, ${corpus} new corpus inputs, exit $rc"
    if [ "$rc" != 0 ] || ls "$work/found-$h"/* > /dev/null 2>&1; then
        status=1
        echo "== FINDING in $name (inputs: $work/found-$h/):" >&2
        grep -v -E "^#[0-9]+.*(NEW|REDUCE|pulse)|^INFO:" "$work/$h.log" | tail -60 >&2
    fi
done
exit "$status"
