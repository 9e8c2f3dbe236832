#!/usr/bin/env bash
# Gives this machine's Docker engine a disk quota per container: its data root moves onto an xfs file system
# mounted with project quotas (a loop file under /var/lib), where overlay2 sizes each container
# (--storage-opt size=, which air passes as the sandbox's disk limit). Without it (overlay2 on ext4, most
# hosts) air watches each container's disk use instead, and a writer gets past the limit until the next check.
#   sudo bash scripts/engine_quota.sh SIZE      # e.g. 200G: the file system's size (a sparse file: grows as used)
# Idempotent: run again, it says the engine has its quota already. It refuses, changing nothing, when not root,
# without mkfs.xfs (apt-get install -y xfsprogs), when this kernel's xfs has no quotas (CONFIG_XFS_QUOTA), or
# while containers run (the engine restarts). Images stay in the old data root: build or load them again
# (uv run air build-image). To undo: remove "data-root" from /etc/docker/daemon.json, the line this adds to
# /etc/fstab, restart the engine, then unmount /var/lib/docker-xfs and delete /var/lib/docker-xfs.img.
set -euo pipefail

size=${1:-}
[[ "$size" =~ ^[0-9]+[KMGTkmgt]?$ ]] || { echo "usage: sudo bash $0 SIZE (e.g. 200G)" >&2; exit 2; }
image=${AIR_QUOTA_IMAGE:-/var/lib/docker-xfs.img}
root=${AIR_QUOTA_ROOT:-/var/lib/docker-xfs}
daemon_json=/etc/docker/daemon.json

refuse() { echo "engine_quota.sh: $*; nothing changed" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || refuse "run it as root (sudo bash $0 $size): it mounts a file system and restarts dockerd"
command -v docker >/dev/null || refuse "no docker CLI: apt-get install -y docker.io"
command -v python3 >/dev/null || refuse "python3 is needed to edit $daemon_json"

if docker info --format '{{.DockerRootDir}} {{.Driver}}' 2>/dev/null | grep -qx "$root overlay2" &&
    findmnt -n -o OPTIONS "$root" | grep -Eq 'prjquota|pquota'; then
    echo "the Docker engine already has its data root on xfs with project quotas ($root): each container gets a quota"
    exit 0
fi

command -v mkfs.xfs >/dev/null || refuse "mkfs.xfs not found: apt-get install -y xfsprogs"
grep -qw xfs /proc/filesystems || modprobe xfs 2>/dev/null || refuse "this kernel has no xfs"
# A kernel's xfs without quotas mounts the file but refuses pquota: try it on a small file first.
trial=$(mktemp -d /tmp/air-xfs-trial-XXXXXX)
truncate -s 320M "$trial/xfs.img"
mkfs.xfs -q "$trial/xfs.img" >/dev/null
mkdir "$trial/mnt"
if ! mount -o loop,pquota "$trial/xfs.img" "$trial/mnt" 2>/dev/null; then
    rm -rf "$trial"
    refuse "this kernel's xfs has no quota support (CONFIG_XFS_QUOTA; dmesg: 'quota support not available'): air's disk watch is all it can have"
fi
umount "$trial/mnt"
rm -rf "$trial"

running=$(docker ps -q | wc -l)
[[ "$running" -eq 0 ]] || refuse "$running containers are running and the engine must restart: stop them first (docker ps)"

if ! mountpoint -q "$root"; then
    if [[ ! -f "$image" ]]; then
        truncate -s "$size" "$image"
        mkfs.xfs -q "$image" >/dev/null
    fi
    mkdir -p "$root"
    mount -o loop,pquota "$image" "$root"
fi
grep -q "^$image $root " /etc/fstab || echo "$image $root xfs loop,pquota 0 0" >> /etc/fstab

mkdir -p "$(dirname "$daemon_json")"
if [[ -f "$daemon_json" && ! -f "$daemon_json.before-air-quota" ]]; then
    cp "$daemon_json" "$daemon_json.before-air-quota"
fi
python3 - "$daemon_json" "$root" <<'EOF'
import json, os, sys
path, root = sys.argv[1], sys.argv[2]
config = json.load(open(path)) if os.path.exists(path) and open(path).read().strip() else {}
config["data-root"] = root
config["storage-driver"] = "overlay2"
with open(path, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
EOF

if command -v systemctl >/dev/null && systemctl is-active --quiet docker 2>/dev/null; then
    systemctl restart docker
else
    echo "restart dockerd yourself (it reads $daemon_json), then: docker info --format '{{.DockerRootDir}} {{.Driver}}'"
    exit 0
fi
docker info --format '{{.DockerRootDir}} {{.Driver}}' | grep -qx "$root overlay2" || {
    echo "engine_quota.sh: the engine did not come back on $root (journalctl -u docker);" \
        "$daemon_json was changed (its old version: $daemon_json.before-air-quota)" >&2
    exit 1
}
echo "the Docker engine's data root is now $root (xfs, pquota): each container gets a disk quota."
echo "Its images stay in the old data root: build or load them again (uv run air build-image); then uv run air check."
