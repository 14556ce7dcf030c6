#!/usr/bin/env bash
# Wheels a user installs without a compiler: manylinux x86-64 wheels for CPython 3.10–3.15,
# each built from the sdist by that interpreter's pip with zig's C compiler targeting glibc 2.28
# (PyPI's ziglang; PATH holds no other compiler), tagged by `auditwheel repair`, then checked:
# `auditwheel show` names a manylinux policy, `twine check --strict`, `check-wheel-contents`,
# and the extension was linked by zig's LLD. 3.10–3.13 are pyenv's (3.11 the host's own);
# 3.14 and 3.15 are Debian sid's, built inside the chroot of this run (.ci/sid.sh).
# Writes the six wheels to /tmp/pydlpack-ci-wheels (or $1); two builds run at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/sid.sh
start=$SECONDS
out=${1:-/tmp/pydlpack-ci-wheels}
work=/tmp/pydlpack-ci-wheelwork
sid_check
rm -rf "$work" "$out"
mkdir -p "$work/raw" "$work/logs" "$out"

python3 -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --upgrade pip
"$work/tools/bin/pip" install -q -r .ci/requirements-wheels.txt
"$work/tools/bin/python" -m build --sdist --outdir "$work" . > /dev/null
tar -xzf "$work"/pydlpack-*.tar.gz -C "$work"
sdist_dir=$(ls -d "$work"/pydlpack-*/)
zig=$("$work/tools/bin/python" -c "import ziglang, os; print(os.path.dirname(ziglang.__file__))")/zig
printf '#!/bin/sh\nexec %s cc -target x86_64-linux-gnu.2.28 "$@"\n' "$zig" > "$work/zigcc"
chmod +x "$work/zigcc"
echo "tools and sdist: $((SECONDS - start)) s"

# The build's environment: zig as compiler and linker, no debug info (Debian's CFLAGS have
# -g), the shared zig cache (glibc 2.28's stubs are built once). Debian's pyconfig.h includes
# <x86_64-linux-gnu/python3.X/pyconfig.h>, which zig (its own libc headers, not /usr/include)
# finds only through this link; no other header is looked up under that prefix.
mkdir -p "$work/multiarch"
ln -s /usr/include/x86_64-linux-gnu "$work/multiarch/x86_64-linux-gnu"
build_env=(CC="$work/zigcc" LDSHARED="$work/zigcc -shared" CFLAGS="-g0 -I$work/multiarch"
           ZIG_GLOBAL_CACHE_DIR="$work/zig-cache")

declare -A pyenv_versions=([3.10]=3.10.13 [3.12]=3.12.1 [3.13]=3.13.0)  # as .ci/run
pyenv_python() {
    local p
    p="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")/versions/$1/bin/python3"
    [ -x "$p" ] || { echo "missing interpreter: Python $1 ($p)" >&2; exit 1; }
    echo "$p"
}

# One wheel: a build venv, its source copy, pip wheel with PATH = the venv's bin only.
build() {       # VERSION, interpreter, "sid" when inside the chroot
    local v=$1 python=$2 venv=$work/venv-$1 src=$work/src-$1 run=()
    [ "${3:-}" = sid ] && run=(in_sid)
    cp -r "$sdist_dir" "$src" && "${run[@]}" "$python" -m venv "$venv" \
        && "${run[@]}" env PATH="$venv/bin" "${build_env[@]}" \
        "$venv/bin/python" -m pip wheel -q --no-deps -w "$work/raw" "$src"
}
lane() {
    local v
    for v in "$@"; do
        case $v in
            3.11) build "$v" "$(command -v python3)" ;;
            3.14|3.15) build "$v" "python$v" sid ;;
            *) build "$v" "$(pyenv_python "${pyenv_versions[$v]}")" ;;
        esac > "$work/logs/$v.log" 2>&1 || { echo "wheel for $v failed:"; cat "$work/logs/$v.log"
                                             return 1; }
        echo "built the $v wheel at $((SECONDS - start)) s"
    done
}
python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
sid_mount
sid_bind "$work"
lane 3.10 3.12 3.14 & a=$!
lane 3.11 3.13 3.15 & b=$!
wait "$a"; wait "$b"
sid_umount

# Tag and check each.
for raw in "$work"/raw/*.whl; do
    PATH="$work/tools/bin:$PATH" auditwheel repair -w "$out" "$raw" > "$work/logs/repair.log" 2>&1 \
        || { cat "$work/logs/repair.log"; exit 1; }
done
for wheel in "$out"/*.whl; do
    policy=$("$work/tools/bin/auditwheel" show "$wheel" 2>/dev/null | tr -s ' \n' ' ' \
             | grep -oE 'consistent with the following platform tag: "manylinux_[0-9_a-z]+"' \
             | grep -oE 'manylinux_[0-9_a-z]+') \
        || { "$work/tools/bin/auditwheel" show "$wheel"; exit 1; }
    so=$(unzip -Z1 "$wheel" | grep '_core.*\.so$')
    unzip -p "$wheel" "$so" > "$work/core.so"
    readelf -p .comment "$work/core.so" | grep -q 'Linker: LLD' \
        || { echo "$wheel: not linked by zig"; exit 1; }
    echo "$(basename "$wheel"): $policy, $(du -k "$wheel" | cut -f1) KiB"
done
test "$(ls "$out"/*.whl | wc -l)" -eq 6
for tag in cp310 cp311 cp312 cp313 cp314 cp315; do ls "$out"/*-"$tag-$tag"-*manylinux*.whl > /dev/null; done
"$work/tools/bin/twine" check --strict "$out"/*.whl
"$work/tools/bin/check-wheel-contents" "$out"
echo "wheels: $((SECONDS - start)) s"
