#!/usr/bin/env bash
# A second Docker engine on this machine, as another node's would be: its own socket, data root and
# containers. For rehearsing an env server "elsewhere" (air rehearse --external-env-server).
#   bash scripts/second_docker_engine.sh start DIR [IMAGE...]   # starts dockerd, copies the images into it
#   bash scripts/second_docker_engine.sh start DIR --btrfs SIZE [IMAGE...]   # its data root on a btrfs
#       file of SIZE (loop-mounted, storage driver btrfs, simple quotas: scripts/btrfs_simple_quota.py says why):
#       an engine that can give containers a disk quota
#   bash scripts/second_docker_engine.sh start DIR --xfs SIZE [IMAGE...]     # its data root on an xfs file
#       of SIZE mounted with project quotas (-o loop,pquota; storage driver overlay2): the quota most hosts
#       can have (scripts/engine_quota.sh gives the main engine one the same way); --xfs-noquota SIZE: the
#       same without pquota (overlay2 on xfs that refuses a quota: the watch's fallback)
#   ... --userns-remap (after any of those): its containers in a user namespace of its own (userns-remap)
#   bash scripts/second_docker_engine.sh stop DIR               # stops it (its containers go with it)
# Then: export DOCKER_HOST=unix://DIR/docker.sock for the processes that should use it.
# Needs root (dockerd, unshare) and the docker CLI. No bridge network: sandbox containers run with network
# "none", and the engine runs in a network namespace of its own.
set -euo pipefail

usage() {
    echo "usage: $0 start DIR [--btrfs SIZE | --xfs SIZE | --xfs-noquota SIZE] [--userns-remap] [IMAGE...] | stop DIR" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
socket="$dir/docker.sock"
fs=""
fs_size=""
pquota=,pquota
if [[ "${1:-}" == --btrfs || "${1:-}" == --xfs || "${1:-}" == --xfs-noquota ]]; then
    [[ $# -ge 2 ]] || usage
    fs=${1#--}
    [[ "$fs" == xfs-noquota ]] && fs=xfs pquota=""
    fs_size=$2
    shift 2
fi
remap=()
if [[ "${1:-}" == --userns-remap ]]; then
    # Every container in one user namespace of the engine's (dockerd makes its user `dockremap` and its
    # /etc/subuid range the first time): what a host with userns-remap in daemon.json runs.
    remap=(--userns-remap=default)
    shift
fi

# Unmounts every mount whose path starts with one of the given prefixes, deepest first.
unmount_below() {
    local prefix mount
    for prefix in "$@"; do
        awk -v root="$prefix" 'index($5, root) == 1 {print $5}' /proc/self/mountinfo
    done | sort -ru | while read -r mount; do umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || true; done
}

case "$action" in
start)
    if [[ -S "$socket" ]] && DOCKER_HOST="unix://$socket" docker info >/dev/null 2>&1; then
        echo "a Docker engine already answers at unix://$socket"
    else
        command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install -y docker.io" >&2; exit 1; }
        driver=()
        if [[ -n "$fs" ]]; then
            # noatime: reading a folder in a container whose quota is full commits a transaction for its atime
            # (btrfs reserves quota for it), and dockerd's removal reads every folder: minutes, under I/O load.
            package=btrfs-progs options=loop,noatime driver=(--storage-driver btrfs)
            if [[ "$fs" == xfs ]]; then
                # pquota: overlay2 sizes a container (--storage-opt size) only with project quotas on.
                package=xfsprogs options=loop$pquota driver=(--storage-driver overlay2)
            fi
            command -v "mkfs.$fs" >/dev/null || { echo "mkfs.$fs not found: apt-get install -y $package" >&2; exit 1; }
            grep -qw "$fs" /proc/filesystems || modprobe "$fs" 2>/dev/null || {
                echo "this kernel has no $fs" >&2; exit 1
            }
            mkdir -p "$dir/data"
            if ! mountpoint -q "$dir/data"; then
                rm -f "$dir/$fs.img"
                truncate -s "$fs_size" "$dir/$fs.img"
                "mkfs.$fs" -q "$dir/$fs.img" >/dev/null
                mount -o "$options" "$dir/$fs.img" "$dir/data" || {
                    rm -f "$dir/$fs.img"
                    echo "cannot mount the $fs file -o $options (a kernel without CONFIG_XFS_QUOTA refuses" \
                        "pquota: dmesg says 'quota support not available')" >&2
                    exit 1
                }
                if [[ "$fs" == btrfs ]]; then
                    # Full quotas (dockerd's own) stop counting once a container is removed: simple ones do not.
                    python3 "$(dirname "$0")/btrfs_simple_quota.py" "$dir/data" ||
                        echo "warning: btrfs full quotas: limits may stop holding once a container is removed" >&2
                fi
            fi
        fi
        # exec-root holds containerd's sockets: a short path keeps them under the 108-byte limit.
        exec_root=$(mktemp -d /tmp/air-engine-XXXXXX)
        echo "$exec_root" > "$dir/exec-root"
        # In a network namespace of its own: a dockerd started with --bridge none deletes any docker0 it sees,
        # which on this host is the first engine's bridge (its containers would lose their network).
        data_root="$dir/data"
        if ((${#remap[@]})); then
            # The remapped root needs o+x on every folder above its data root, which a test's 0700 temporary
            # folder lacks: a folder of its own under /tmp (1777) instead, removed on stop.
            data_root=$(mktemp -d /tmp/air-engine-data-XXXXXX)
            chmod 711 "$data_root"
            echo "$data_root" > "$dir/data-root"
        fi
        nohup unshare --net dockerd --host "unix://$socket" --data-root "$data_root" --exec-root "$exec_root" \
            --pidfile "$dir/docker.pid" "${driver[@]}" "${remap[@]}" --bridge none --iptables=false --ip6tables=false --ip-masq=false \
            > "$dir/dockerd.log" 2>&1 &
        for _ in $(seq 60); do
            DOCKER_HOST="unix://$socket" docker info >/dev/null 2>&1 && break
            sleep 1
        done
        DOCKER_HOST="unix://$socket" docker info >/dev/null 2>&1 || {
            echo "the second dockerd did not start; its log: $dir/dockerd.log" >&2; tail -5 "$dir/dockerd.log" >&2; exit 1
        }
    fi
    for image in "$@"; do
        if DOCKER_HOST="unix://$socket" docker image inspect "$image" >/dev/null 2>&1; then
            echo "$image: already there"
        else
            echo "copying $image into the second engine"
            docker save "$image" | DOCKER_HOST="unix://$socket" docker load
        fi
    done
    echo "export DOCKER_HOST=unix://$socket"
    ;;
stop)
    if [[ -f "$dir/docker.pid" ]]; then
        pid=$(cat "$dir/docker.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    if [[ -f "$dir/exec-root" ]]; then
        exec_root=$(cat "$dir/exec-root")
        # A dockerd that was killed (a test's "engine dies") leaves its containers running under their shims, and
        # nothing would ever end them (nor free what they hold: a loop device of a container's own file system).
        # Each ends with its init, the shim's child (its pid namespace goes with it); then the shim.
        for shim in $(pgrep -f -- "containerd-shim.* -address $exec_root/" || true); do
            pkill -KILL -P "$shim" 2>/dev/null || true
            kill -KILL "$shim" 2>/dev/null || true
        done
        # A container's network namespace file (exec-root/netns/ID, an nsfs mount) can outlive a dockerd
        # stopped mid-clean-up: rm then fails with "Device or resource busy". Unmount what is left, deepest
        # first, then remove.
        # (A remapping engine keeps its state in exec-root.UID.GID beside it.)
        for _ in 1 2 3; do
            unmount_below "$exec_root/" "$exec_root."
            rm -rf "$exec_root" "$exec_root".* 2>/dev/null && break
            sleep 1
        done
        rm -rf "$exec_root" "$exec_root".* "$dir/exec-root"
    fi
    if mountpoint -q "$dir/data"; then
        # A data root of --btrfs or --xfs; its loop device goes with it (mount -o loop set autoclear).
        umount "$dir/data" || umount -l "$dir/data"
    fi
    if [[ -f "$dir/data-root" ]]; then
        data_root=$(cat "$dir/data-root")
        unmount_below "$data_root/"
        rm -rf "$data_root" "$dir/data-root"
    fi
    rm -f "$dir/btrfs.img" "$dir/xfs.img"
    echo "stopped the Docker engine at unix://$socket"
    ;;
*) usage ;;
esac
