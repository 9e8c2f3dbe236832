#!/usr/bin/env bash
# Gives this machine's Docker engine a disk quota per container: its data root moves onto a file system in a
# loop file under /var/lib where the storage driver sizes each container (--storage-opt size=, which air passes
# as the sandbox's disk limit). Without it (overlay2 on ext4, most hosts) air watches each container's disk use
# instead, and a writer gets past the limit until the next check.
#   sudo bash scripts/engine_quota.sh [--fs xfs|btrfs] SIZE   # e.g. 200G: the file system's size (a sparse
#                                                             # file: grows as used)
# Which file system: xfs mounted with project quotas (storage driver overlay2) where this kernel's xfs has quotas
# (CONFIG_XFS_QUOTA; tried on a small file first), else btrfs with simple quotas (storage driver btrfs; Linux 6.7+:
# full quotas stop counting once a container is removed, see scripts/btrfs_simple_quota.py); --fs picks one.
# Idempotent: run again, it says the engine has its quota already. It refuses, changing nothing, when not root,
# without mkfs.xfs / mkfs.btrfs (apt-get install -y xfsprogs btrfs-progs), when this kernel lacks the file system
# or its quota, or while containers run (the engine restarts). Images stay in the old data root: build or load
# them again (uv run air build-image). To undo: remove "data-root" and "storage-driver" from
# /etc/docker/daemon.json and the line this adds to /etc/fstab, restart the engine, then unmount
# /var/lib/docker-FS and delete /var/lib/docker-FS.img.
# For tests only: AIR_QUOTA_IMAGE, AIR_QUOTA_ROOT, AIR_QUOTA_FSTAB, AIR_QUOTA_DAEMON_JSON replace those paths;
# with AIR_QUOTA_DAEMON_JSON set, dockerd is not restarted.
set -euo pipefail

usage() { echo "usage: sudo bash $0 [--fs xfs|btrfs] SIZE (e.g. 200G)" >&2; exit 2; }
fs=""
if [[ "${1:-}" == --fs ]]; then
    [[ "${2:-}" == xfs || "${2:-}" == btrfs ]] || usage
    fs=$2
    shift 2
fi
size=${1:-}
[[ $# -eq 1 && "$size" =~ ^[0-9]+[KMGTkmgt]?$ ]] || usage
daemon_json=${AIR_QUOTA_DAEMON_JSON:-/etc/docker/daemon.json}
fstab=${AIR_QUOTA_FSTAB:-/etc/fstab}
here=$(cd "$(dirname "$0")" && pwd)

refuse() { echo "engine_quota.sh: $*; nothing changed" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || refuse "run it as root (sudo bash $0 $size): it mounts a file system and restarts dockerd"
command -v docker >/dev/null || refuse "no docker CLI: apt-get install -y docker.io"
command -v python3 >/dev/null || refuse "python3 is needed to edit $daemon_json"

# Whether this kernel mounts a small file of the file system with its quota ("" if so, else why not).
trial_problem() {
    local fs=$1 trial problem=""
    command -v "mkfs.$fs" >/dev/null || { echo "mkfs.$fs not found: apt-get install -y $([[ $fs == xfs ]] && echo xfsprogs || echo btrfs-progs)"; return; }
    grep -qw "$fs" /proc/filesystems || modprobe "$fs" 2>/dev/null || { echo "this kernel has no $fs"; return; }
    trial=$(mktemp -d /tmp/air-quota-trial-XXXXXX)
    truncate -s 320M "$trial/fs.img"
    "mkfs.$fs" -q "$trial/fs.img" >/dev/null 2>&1
    mkdir "$trial/mnt"
    if [[ $fs == xfs ]]; then
        mount -o loop,pquota "$trial/fs.img" "$trial/mnt" 2>/dev/null ||
            problem="this kernel's xfs has no quota support (CONFIG_XFS_QUOTA; dmesg: 'quota support not available')"
    elif mount -o loop "$trial/fs.img" "$trial/mnt" 2>/dev/null; then
        problem=$(python3 "$here/btrfs_simple_quota.py" "$trial/mnt" 2>&1) || true
    else
        problem="this kernel cannot mount a btrfs file"
    fi
    mountpoint -q "$trial/mnt" && umount "$trial/mnt"
    rm -rf "$trial"
    echo "$problem"
}

if [[ -z "$fs" ]]; then
    # The one the engine already has wins (idempotent), then xfs where it has quotas, then btrfs.
    for candidate in xfs btrfs; do
        [[ -f "${AIR_QUOTA_IMAGE:-/var/lib/docker-$candidate.img}" ]] && fs=$candidate
    done
    if [[ -z "$fs" ]]; then
        xfs_problem=$(trial_problem xfs)
        fs=xfs
        [[ -z "$xfs_problem" ]] || fs=btrfs
    fi
fi
image=${AIR_QUOTA_IMAGE:-/var/lib/docker-$fs.img}
root=${AIR_QUOTA_ROOT:-/var/lib/docker-$fs}
driver=overlay2 options=loop,pquota
# noatime: on btrfs, reading a folder of a container whose quota is full commits a transaction for its atime (the
# quota is reserved for it), and dockerd's removal reads every folder: minutes per container under I/O load.
[[ $fs == btrfs ]] && driver=btrfs options=loop,noatime

if [[ -z "${AIR_QUOTA_DAEMON_JSON:-}" ]] &&
    docker info --format '{{.DockerRootDir}} {{.Driver}}' 2>/dev/null | grep -qx "$root $driver" &&
    findmnt -n -o FSTYPE "$root" | grep -qx "$fs"; then
    echo "the Docker engine already has its data root on $fs with quotas ($root): each container gets a quota"
    exit 0
fi

if mountpoint -q "$root"; then
    mounted=$(findmnt -n -o FSTYPE "$root")
    [[ "$mounted" == "$fs" ]] || refuse "$root is mounted already, as $mounted, not $fs"
else
    problem=$(trial_problem "$fs")
    if [[ -n "$problem" && -n "${xfs_problem:-}" ]]; then
        refuse "no file system here can give containers a quota: $xfs_problem; $problem; air's disk watch is all it can have"
    fi
    [[ -z "$problem" ]] || refuse "$problem: air's disk watch is all it can have (or try --fs $([[ $fs == xfs ]] && echo btrfs || echo xfs))"
fi

running=$(docker ps -q | wc -l)
[[ "$running" -eq 0 ]] || refuse "$running containers are running and the engine must restart: stop them first (docker ps)"

if ! mountpoint -q "$root"; then
    if [[ ! -f "$image" ]]; then
        truncate -s "$size" "$image"
        "mkfs.$fs" -q "$image" >/dev/null
    fi
    mkdir -p "$root"
    mount -o "$options" "$image" "$root"
fi
# Before dockerd's btrfs driver turns on full quotas itself (a no-op once on: the flag stays on the disk).
[[ $fs == btrfs ]] && python3 "$here/btrfs_simple_quota.py" "$root"
grep -q "^$image $root " "$fstab" 2>/dev/null || echo "$image $root $fs $options 0 0" >> "$fstab"

mkdir -p "$(dirname "$daemon_json")"
if [[ -f "$daemon_json" && ! -f "$daemon_json.before-air-quota" ]]; then
    cp "$daemon_json" "$daemon_json.before-air-quota"
fi
python3 - "$daemon_json" "$root" "$driver" <<'EOF'
import json, os, sys
path, root, driver = sys.argv[1:]
config = json.load(open(path)) if os.path.exists(path) and open(path).read().strip() else {}
config["data-root"] = root
config["storage-driver"] = driver
with open(path, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
EOF

if [[ -z "${AIR_QUOTA_DAEMON_JSON:-}" ]] && command -v systemctl >/dev/null &&
    systemctl is-active --quiet docker 2>/dev/null; then
    systemctl restart docker
else
    echo "restart dockerd yourself (it reads $daemon_json), then: docker info --format '{{.DockerRootDir}} {{.Driver}}'"
    exit 0
fi
docker info --format '{{.DockerRootDir}} {{.Driver}}' | grep -qx "$root $driver" || {
    echo "engine_quota.sh: the engine did not come back on $root (journalctl -u docker);" \
        "$daemon_json was changed (its old version: $daemon_json.before-air-quota)" >&2
    exit 1
}
echo "the Docker engine's data root is now $root ($fs, storage driver $driver): each container gets a disk quota."
echo "Its images stay in the old data root: build or load them again (uv run air build-image); then uv run air check."
