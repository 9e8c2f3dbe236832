# Sourced by install_prime_rl.sh --cpu-trainer, after orchestrator_venv.sh built $VENV ($DIR, $VENV,
# $GENERATION, $AIR_DIR set). Adds what prime-rl's own trainer entry point needs to run on the CPU, for
# `air rehearse --trainer` (air_prime_rl.classic.trainer and air_prime_rl.cpu_torch, in prime_rl_side/):
#   classic (c87c19b): the trainer's packages at the versions of prime-rl's uv.lock (as constraints),
#       torchtitan at the lock's git revision (PRIME_RL_TORCHTITAN may name a requirement or a path instead;
#       its dependencies, tensorboard among them, at the lock's versions), and import-only stand-ins for
#       flash_attn, vLLM's NCCL classes and dion (prime_rl_side/stand_ins/cpu) on the venv's path.
#   v1 (today's): prime_rl_side/install/cpu_trainer_v1.sh.
# Idempotent: a venv where the trainer already imports is only checked.

# prime-rl's uv.lock, read for the trainer: WORK/constraints.txt (registry packages at the lock's versions;
# torch, a CUDA build there, and CUDA/triton wheels stay the venv's own) and WORK/torchtitan.txt (its git
# source, where the lock has one).
read_trainer_lock() { # DIR WORK
    python3 - "$1" "$2" <<'PY' || die "cannot read $1/uv.lock"
import sys, tomllib
from pathlib import Path
root, work = Path(sys.argv[1]), Path(sys.argv[2])
pins, titan = [], ""
for package in tomllib.load(open(root / "uv.lock", "rb")).get("package", []):
    name, source = package["name"], package.get("source", {})
    if name == "torchtitan" and "git" in source:
        url, _, commit = source["git"].partition("#")
        titan = f"torchtitan @ git+{url.split('?')[0]}@{commit}"
    elif "registry" in source and not name.startswith(("nvidia-", "triton", "cuda-")) and name != "torch":
        pins.append(f"{name}=={package['version'].split('+')[0]}")
(work / "constraints.txt").write_text("\n".join(sorted(set(pins))) + "\n")
(work / "torchtitan.txt").write_text(titan + "\n")
PY
}

# PACKAGE... into $PY at the lock's versions (WORK/constraints.txt); those matching NO_DEPS (a regex) without
# their dependencies (ring-flash-attn asks for flash-attn: CUDA, a stand-in here).
install_trainer_packages() { # WORK NO_DEPS PACKAGE...
    local work=$1 no_deps=$2 package with=() without=()
    shift 2
    for package in "$@"; do
        if [[ $package =~ $no_deps ]]; then without+=("$package"); else with+=("$package"); fi
    done
    uv pip install --quiet --python "$PY" --constraint "$work/constraints.txt" "${with[@]}" ||
        die "installing the trainer's packages failed (${with[*]}; PRIME_RL_TORCHTITAN may name a local torchtitan source tree)"
    if [[ ${#without[@]} -gt 0 ]]; then
        uv pip install --quiet --python "$PY" --constraint "$work/constraints.txt" --no-deps "${without[@]}" ||
            die "installing ${without[*]} failed"
    fi
}

if [[ $GENERATION == v1 ]]; then
    # shellcheck source=prime_rl_side/install/cpu_trainer_v1.sh
    source "$AIR_DIR/prime_rl_side/install/cpu_trainer_v1.sh"
    return 0
fi

PY="$VENV/bin/python"
# Imported by prime_rl.trainer.rl.train and what it pulls in, beyond the orchestrator's packages.
TRAINER_PACKAGES=(beartype jaxtyping torchdata tyro ring-flash-attn prometheus-client)
# ring-flash-attn asks for flash-attn (CUDA; a stand-in here).
TRAINER_NO_DEPS='^(ring-flash-attn)$'
TRAINER_CHECK='import prime_rl.trainer.rl.train, prime_rl.orchestrator.orchestrator, air_mlgym, torchtitan
import air_prime_rl.classic.trainer, air_prime_rl.cpu_torch'

install_air_side "$PY" 1 # the stand-ins: the trainer imports all three at load (orchestrator_venv.sh)
if "$PY" -c "$TRAINER_CHECK" >/dev/null 2>&1; then
    say "the trainer already imports in $VENV (CPU trainer ready)"
else
    trainer_work=$(mktemp -d)
    say "reading prime-rl's uv.lock for the trainer's versions"
    read_trainer_lock "$DIR" "$trainer_work"
    TITAN=${PRIME_RL_TORCHTITAN:-$(cat "$trainer_work/torchtitan.txt")}
    [[ -n "$TITAN" ]] || die "no torchtitan source in $DIR/uv.lock (set PRIME_RL_TORCHTITAN)"
    say "installing the trainer's packages: ${TRAINER_PACKAGES[*]}, torchtitan ($TITAN)"
    install_trainer_packages "$trainer_work" "$TRAINER_NO_DEPS" "$TITAN" "${TRAINER_PACKAGES[@]}"
    rm -rf "$trainer_work"
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$PY" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true

    report=$("$PY" -c "$TRAINER_CHECK" 2>&1) ||
        die "prime-rl's trainer does not import in $VENV: $(tail -n 3 <<<"$report")"
    echo "    prime_rl.trainer.rl.train imports in $VENV (on the CPU: air_prime_rl.classic.trainer runs it)"
fi
