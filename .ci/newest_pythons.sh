#!/usr/bin/env bash
# Python 3.14 and 3.15, Debian sid's interpreters in a chroot (.ci/sid.sh). Needs root.
#   .ci/newest_pythons.sh chroot       make the chroot from scratch (debootstrap from the host's
#                                      Debian mirror, then python3.X, -dev, -venv; no compiler)
#   .ci/newest_pythons.sh leg 3.14     a fresh venv with every library of
#                                      .ci/requirements-libs.txt that has a wheel for it (those
#                                      without are named), pydlpack from its wheel in
#                                      /tmp/pydlpack-ci-wheels (.ci/wheels.sh), the suite from an
#                                      empty directory with DeprecationWarning an error, mypy
#   .ci/newest_pythons.sh remove       delete the chroot
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/sid.sh
start=$SECONDS
wheels=/tmp/pydlpack-ci-wheels

make_chroot() {
    local mirror apt=(apt-get -q -y -o Acquire::Check-Valid-Until=false -o Acquire::Languages=none)
    command -v debootstrap > /dev/null || apt-get install -q -y debootstrap > /dev/null
    # The host's own Debian mirror (the archive CI can reach), deb822 or one-line sources.
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
                 /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v '^[[:space:]]*#' \
             | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' \
             || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    sid_remove
    debootstrap --variant=minbase sid "$SID" "$mirror" > /tmp/pydlpack-ci-debootstrap.log \
        || { tail -20 /tmp/pydlpack-ci-debootstrap.log; exit 1; }
    cp /etc/ssl/certs/ca-certificates.crt "$SID$SID_CA"
    sid_mount
    # sid's Release file may be past its Valid-Until on a frozen mirror.
    in_sid "${apt[@]}" update > /dev/null
    for version in 3.14 3.15; do
        in_sid apt-cache show "python$version-venv" > /dev/null 2>&1 \
            || { echo "sid has no python$version-venv" >&2; exit 1; }
    done
    in_sid "${apt[@]}" install --no-install-recommends python3.14 python3.14-dev python3.14-venv \
        python3.15 python3.15-dev python3.15-venv > /dev/null
    # The legs prove an install with no compiler present: the chroot must have none.
    in_sid /bin/sh -c '! command -v gcc && ! command -v cc && ! command -v clang' > /dev/null \
        || { echo "the chroot has a C compiler" >&2; exit 1; }
    echo "$PYDLPACK_CI_RUN" > "$SID/etc/pydlpack-ci-run"
    echo "sid chroot from $mirror: $(in_sid python3.14 -VV | head -1); $(in_sid python3.15 -V);" \
         "$(du -sh --one-file-system "$SID" | cut -f1), $((SECONDS - start)) s"
}

leg() {
    local version=$1 tag wheel venv=/tmp/pydlpack-ci-$1 ci=/tmp/pydlpack-ci-files-$1 lacking=()
    tag=cp${version/./}
    sid_check
    wheel=$(ls "$wheels"/pydlpack-*-"$tag-$tag"-*manylinux*.whl)
    sid_mount
    rm -rf "$SID$ci" && mkdir -p "$SID$ci"
    cp .ci/requirements-libs.txt .ci/typed_usage.py "$wheel" "$SID$ci/"
    in_sid rm -rf "$venv"
    in_sid "python$version" -m venv "$venv"
    in_sid "$venv/bin/python" -m pip install -q --upgrade pip
    # Every library with a wheel for this Python (nothing here may compile).
    if ! in_sid "$venv/bin/pip" install -q --only-binary :all: -r "$ci/requirements-libs.txt" \
            2> /dev/null; then
        for req in $(grep -v '^#' .ci/requirements-libs.txt); do
            in_sid "$venv/bin/pip" install -q --only-binary :all: "$req" 2> /dev/null \
                || lacking+=("$req")
        done
    fi
    echo "Python $version lacks wheels of: ${lacking[*]:-nothing in .ci/requirements-libs.txt}"
    # pydlpack from its wheel, nothing else allowed (no index, no sdist, no compiler).
    in_sid "$venv/bin/pip" install -q --no-index --only-binary :all: --no-deps \
        "$ci/$(basename "$wheel")"
    in_sid "$venv/bin/pip" list 2>/dev/null | grep -iE \
        "^(pydlpack|numpy|jax|pyarrow|polars|pandas|pillow|ml.dtypes|array.api.strict) " \
        | tr -s ' ' | paste -sd ' '
    # DeprecationWarning is an error here: what the next Python removes fails a test today.
    in_sid /bin/bash -c "cd \$(mktemp -d) && $venv/bin/python -m pytest -q -p no:cacheprovider \
        -W error::DeprecationWarning --pyargs dlpack.tests > $ci/suite.log 2>&1" \
        || { tail -80 "$SID$ci/suite.log"; exit 1; }
    grep -E 'randomly-seed=' "$SID$ci/suite.log" || true
    tail -1 "$SID$ci/suite.log"
    if in_sid "$venv/bin/python" -c "import mypy" 2> /dev/null; then
        in_sid "$venv/bin/python" -m mypy --strict --cache-dir /dev/null "$ci/typed_usage.py"
    fi
    echo "Python $version leg: $((SECONDS - start)) s"
}

case "${1:-}" in
    chroot) make_chroot ;;
    leg) leg "$2" ;;
    remove) sid_remove ;;
    *) echo "usage: $0 chroot | leg 3.14|3.15 | remove" >&2; exit 2 ;;
esac
