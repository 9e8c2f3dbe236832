#!/usr/bin/env bash
# The install route for training on GPUs: clone prime-rl at the commit our configs are written for,
# sync its venv, and install this project into that venv (prime-rl imports env ids as modules, so
# `air_mlgym` must be importable there). Prints the commands to run next. Idempotent: run again, it
# only checks.
#
#   bash scripts/install_prime_rl.sh [DIR]      DIR: where prime-rl goes (default $PRIME_RL_DIR, else ~/prime-rl)
#   bash scripts/install_prime_rl.sh --orchestrator-only [DIR]
#       Only what prime-rl's orchestrator needs, for `air rehearse` on a machine without CUDA: a venv in
#       DIR/.venv-orchestrator with CPU torch (no vLLM, no flash-attn, no CUDA torch where the CPU index is
#       reachable), prime-rl's source on its path, its pinned verifiers build, and air-agent[tiny].
#       Versions come from prime-rl's own uv.lock (as constraints). Leaves DIR/.venv alone.
#
# Environment: PRIME_RL_REPO  clone source (default GitHub; a mirror or a local clone works too)
#              PRIME_RL_COMMIT  the commit to check out (default: the pinned one; override only for mirrors
#                               whose history was rewritten, never to run another prime-rl version)
#              --orchestrator-only only:
#              VERIFIERS_REPO  where prime-rl's pinned verifiers commit is cloned from (default GitHub)
#              PRIME_RL_PYTHON  the venv's Python (default 3.12, prime-rl's; 3.11 works for the orchestrator)
#              PRIME_RL_TORCH  a torch requirement or wheel file to install instead of the CPU index's build
set -euo pipefail

ORCHESTRATOR_ONLY=0
POSITIONAL=()
for arg in "$@"; do
    case "$arg" in
        --orchestrator-only) ORCHESTRATOR_ONLY=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) printf 'error: unknown option %s (see --help)\n' "$arg" >&2; exit 2 ;;
        *) POSITIONAL+=("$arg") ;;
    esac
done
[[ ${#POSITIONAL[@]} -le 1 ]] || { printf 'error: one DIR at most, got: %s\n' "${POSITIONAL[*]}" >&2; exit 2; }
set -- "${POSITIONAL[@]}"

AIR_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$PATH:$HOME/.local/bin"
# One source of truth for the pin: air/training/config_files.py.
PINNED=$(sed -n 's/^PRIME_RL_COMMIT = "\([0-9a-f]*\)"$/\1/p' "$AIR_DIR/air/training/config_files.py")
COMMIT=${PRIME_RL_COMMIT:-$PINNED}
REPO=${PRIME_RL_REPO:-https://github.com/PrimeIntellect-ai/prime-rl.git}
DIR=${1:-${PRIME_RL_DIR:-$HOME/prime-rl}}
DIR=$(mkdir -p "$(dirname "$DIR")" && cd "$(dirname "$DIR")" && pwd)/$(basename "$DIR")

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

[[ -n "$COMMIT" ]] || die "could not read PRIME_RL_COMMIT from $AIR_DIR/air/training/config_files.py"
command -v git >/dev/null || die "git is missing: sudo apt-get install -y git"
if ! command -v uv >/dev/null; then
    say "installing uv"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --user uv || die "could not install uv (pip install uv)"
    hash -r
fi

say "prime-rl at $COMMIT in $DIR"
if [[ -d "$DIR/.git" ]]; then
    head=$(git -C "$DIR" rev-parse HEAD)
    if [[ "$head" != "$COMMIT"* ]]; then
        [[ -z "$(git -C "$DIR" status --porcelain --untracked-files=no)" ]] ||
            die "$DIR has local changes and is at ${head:0:12}, not $COMMIT; commit or stash them, then run again"
        git -C "$DIR" cat-file -e "$COMMIT^{commit}" 2>/dev/null || git -C "$DIR" fetch --quiet origin ||
            die "cannot fetch $COMMIT into $DIR"
        git -C "$DIR" -c advice.detachedHead=false checkout --quiet "$COMMIT"
    fi
elif [[ -e "$DIR" ]]; then
    die "$DIR exists and is not a git checkout; remove it or pass another DIR"
else
    git clone --quiet "$REPO" "$DIR" || die "cannot clone $REPO (no network? set PRIME_RL_REPO to a mirror)"
    git -C "$DIR" -c advice.detachedHead=false checkout --quiet "$COMMIT" ||
        die "$REPO has no commit $COMMIT"
fi
head=$(git -C "$DIR" rev-parse HEAD)
[[ "$head" == "$COMMIT"* ]] || die "$DIR is at ${head:0:12}, expected $COMMIT"
echo "    at ${head:0:12}"

if [[ $ORCHESTRATOR_ONLY == 1 ]]; then
    # shellcheck source=scripts/install_orchestrator_only.sh
    source "$AIR_DIR/scripts/install_orchestrator_only.sh"
    exit 0
fi

say "syncing prime-rl's venv (uv sync; the first time downloads CUDA torch and vLLM: several GB)"
(cd "$DIR" && uv sync) || die "uv sync failed in $DIR (prime-rl needs Python 3.12 and Linux x86_64 with CUDA 12.8 wheels)"
PY="$DIR/.venv/bin/python"
[[ -x "$PY" ]] || die "uv sync made no venv at $DIR/.venv"

say "installing air-agent (editable) into prime-rl's venv"
verifiers_before=$("$PY" -c 'import importlib.metadata as m; print(m.version("verifiers"))' 2>/dev/null || echo none)
# Editable, so configs/ and code changes in $AIR_DIR apply without reinstalling. Our verifiers range
# admits prime-rl's pinned build, so uv keeps it.
uv pip install --quiet --python "$PY" -e "$AIR_DIR" || die "uv pip install -e $AIR_DIR failed"
verifiers_after=$("$PY" -c 'import importlib.metadata as m; print(m.version("verifiers"))')
if [[ "$verifiers_before" != none && "$verifiers_before" != "$verifiers_after" ]]; then
    die "installing air-agent changed prime-rl's verifiers ($verifiers_before -> $verifiers_after); please report this"
fi
"$PY" -c 'import air_mlgym, verifiers' || die "air_mlgym does not import in $PY"
echo "    air_mlgym imports; verifiers $verifiers_after"

cat <<EOF

Done. prime-rl is at ${head:0:12} in $DIR, with air-agent installed into its venv.
Next (the sandbox image and Docker come from: bash $AIR_DIR/scripts/setup.sh):

  export PRIME_RL_DIR=$DIR
  export MLGYM_ROOT=/path/to/MLGym        # a checkout of facebookresearch/MLGym, for the MLGym tasks

  # preflight: config, Docker, image, tasks, GPUs, prime-rl, env loading (touches no GPU)
  $DIR/.venv/bin/air check --config $AIR_DIR/configs/mlgym/rl_debug.toml

  # train, from any directory; records the process tree so \`air clean\` can stop leftovers
  $DIR/.venv/bin/air train --config $AIR_DIR/configs/mlgym/rl_debug.toml

  # or plain prime-rl
  cd $DIR && uv run rl @ $AIR_DIR/configs/mlgym/rl_debug.toml
EOF
