#!/usr/bin/env bash
# Run each atheris harness (fuzz/fuzz_*.py) for a bounded time from its seed corpus
# (fuzz/corpus/NAME/, read only: new inputs go to a scratch directory) and fail on any finding:
# an escaped exception, a broken check, a crash, a hang, a sanitizer report.
#   fuzz/run.sh [SECONDS_PER_HARNESS [HARNESS...]]     PYTHON=... picks the interpreter
# The interpreter needs atheris and dlpack importable (the sanitizer job: its ASan build, with
# libasan preloaded by the caller). The crashing input of a finding is left in the scratch
# directory (printed); replay it with: python fuzz/fuzz_NAME.py FILE
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
status=0
for h in "${harnesses[@]}"; do
    name=fuzz_$h
    mkdir -p "$work/corpus-$h" "$work/found-$h"
    args=(-max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
          -artifact_prefix="$work/found-$h/")
    [ -f "$here/$name.dict" ] && args+=(-dict="$here/$name.dict")
    rc=0
    (cd "$work" && "$python" "$here/$name.py" "${args[@]}" "$work/corpus-$h" \
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
