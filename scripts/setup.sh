#!/usr/bin/env bash
# One-time set-up of a machine (Debian/Ubuntu): installs only what is missing (uv, the Docker
# engine, debootstrap, Chromium for the viewer's browser test), starts dockerd if nothing
# answers, syncs the locked environment and builds the sandbox image. Idempotent: a second run does nothing but check. Used by the README's first
# command and by CI (.ci/run).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:$HOME/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export DEBIAN_FRONTEND=noninteractive
DOCKERD_LOG="${AIR_DOCKERD_LOG:-${TMPDIR:-/tmp}/air-dockerd.log}"

now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
fmt_ms() { printf '%d.%01ds' $(($1 / 1000)) $(($1 % 1000 / 100)); }
CI_START=$(now_ms)
SECTION=""
SECTION_START=0

end_section() {
    if [[ -n "$SECTION" ]]; then
        echo "    ${SECTION}: $(fmt_ms $(($(now_ms) - SECTION_START)))"
    fi
    SECTION=""
}
section() {
    end_section
    SECTION=$1
    SECTION_START=$(now_ms)
    echo "==> $1"
}
on_exit() {
    local rc=$?
    end_section
    echo "==> total $(fmt_ms $(($(now_ms) - CI_START))) (exit $rc)"
}
trap on_exit EXIT

as_root() {  # run a command as root: directly when we are root, else through sudo
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "error: '$*' needs root; run this script as root, or install it yourself and run again" >&2
        exit 1
    fi
}

have() { command -v "$1" >/dev/null 2>&1; }

section "system packages"
missing=()
have python3 || missing+=(python3)
if ! have uv && ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
{ have docker && have dockerd; } || missing+=(docker.io)
{ have debootstrap || [[ -x /usr/sbin/debootstrap ]]; } || missing+=(debootstrap)
# btrfs-progs: the disk-quota tests run a second engine on a btrfs file (ext4's overlay2 cannot size containers),
# and scripts/engine_quota.sh's btrfs route (kernels whose xfs has no quotas) makes one.
{ have mkfs.btrfs || [[ -x /usr/sbin/mkfs.btrfs ]] || [[ -x /sbin/mkfs.btrfs ]]; } || missing+=(btrfs-progs)
# xfsprogs: and on an xfs file with project quotas (overlay2's quota; scripts/engine_quota.sh uses it too).
{ have mkfs.xfs || [[ -x /usr/sbin/mkfs.xfs ]] || [[ -x /sbin/mkfs.xfs ]]; } || missing+=(xfsprogs)
# Debian's Chromium: the viewer's browser test drives it headless (AIR_SKIP_BROWSER=1 to leave it out).
if [[ -z "${AIR_SKIP_BROWSER:-}" ]] && ! have chromium && [[ -z "${AIR_CHROMIUM:-}" ]]; then missing+=(chromium); fi
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
else
    echo "all present"
fi

section "uv"
if ! have uv; then
    # Debian's python3 is "externally managed" (PEP 668); uv is a standalone binary, so this is safe.
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet uv
    hash -r
fi
uv --version

section "docker engine"
if docker info >/dev/null 2>&1; then
    echo "dockerd answers"
else
    echo "starting dockerd (log: $DOCKERD_LOG)"
    as_root nohup dockerd >>"$DOCKERD_LOG" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        if ! kill -0 "$dockerd_pid" 2>/dev/null; then
            break
        fi
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        if kill -0 "$dockerd_pid" 2>/dev/null; then
            echo "dockerd did not answer within 60 s; last lines of $DOCKERD_LOG:" >&2
        else
            echo "dockerd exited; last lines of $DOCKERD_LOG:" >&2
        fi
        tail -n 40 "$DOCKERD_LOG" >&2 || true
        exit 1
    fi
    echo "dockerd answers (pid $dockerd_pid)"
fi

section "uv sync"
# What the main job and the viewer need, nothing more (about 550 MB): verifiers 0.1.10 and its datasets stack,
# Streamlit. The tests' tools and torch (on Linux PyPI's torch brings 4 GB of CUDA wheels) come with
# scripts/test.sh, which adds them to the same .venv. --inexact: a re-run keeps what test.sh added.
# A new venv's bytecode is compiled once here (every later process imports faster, also where
# PYTHONDONTWRITEBYTECODE is set); a re-run only checks, without re-checking every compiled file.
if [[ -d .venv ]]; then uv sync --locked --inexact; else uv sync --locked --inexact --compile-bytecode; fi

section "sandbox image"
uv run air build-image


end_section
# `uv run air` works only in this folder (elsewhere uv answers "Failed to spawn: air"): say how to reach it.
cat <<DONE
Set up. The main job: uv run air standalone   (in $PWD)
From any other folder: uv run --project $PWD air ...   (or put air on your PATH once:
ln -s $PWD/.venv/bin/air ~/.local/bin/air)
DONE
