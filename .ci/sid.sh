# The Debian sid chroot that gives CI its Python 3.14 and 3.15 (Debian's unstable suite is
# where these machines find them): sourced by .ci/newest_pythons.sh and .ci/wheels.sh.
# Made afresh by each CI run (`.ci/newest_pythons.sh chroot`), which writes its token
# ($PYDLPACK_CI_RUN, set by .ci/run) into it; a script refuses a chroot another run made.
# Commands inside run with a clean environment (the host's PIP_* settings name paths the
# chroot lacks) and the host's CA bundle; what a script mounts it unmounts on exit.
SID=/tmp/pydlpack-ci-sid
SID_CA=/etc/pydlpack-ci-ca.crt          # the host's CA bundle, copied in (pip's only one)
sid_mounts=()

in_sid() {
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive PIP_CERT="$SID_CA" \
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 \
        chroot "$SID" "$@"
}

# Bind-mount a host path at the same path inside the chroot (unmounted by sid_umount).
sid_bind() {
    mkdir -p "$SID$1"
    mount --bind "$1" "$SID$1"
    sid_mounts+=("$SID$1")
}

sid_mount() {
    local d
    for d in /proc /sys /dev /dev/pts /dev/shm; do sid_bind "$d"; done
    trap sid_umount EXIT
    trap 'exit 143' TERM      # stopped by .ci/run (the other lane failed): unmount all the same
}

sid_umount() {
    local i
    for ((i = ${#sid_mounts[@]} - 1; i >= 0; i--)); do
        umount "${sid_mounts[i]}" || umount -l "${sid_mounts[i]}"
    done
    sid_mounts=()
}

# Fails unless the chroot exists and was made by this CI run.
sid_check() {
    [ "$(cat "$SID/etc/pydlpack-ci-run" 2>/dev/null)" = "${PYDLPACK_CI_RUN:?set by .ci/run}" ] \
        || { echo "no chroot made by this run at $SID: run .ci/newest_pythons.sh chroot" >&2
             exit 1; }
}

# Removes the chroot; refuses while anything is mounted under it (a bind-mounted /dev would
# otherwise be emptied).
sid_remove() {
    if grep -q " $SID/" /proc/mounts; then
        echo "still mounted under $SID:" >&2; grep " $SID/" /proc/mounts >&2; exit 1
    fi
    rm -rf --one-file-system "$SID"
}
