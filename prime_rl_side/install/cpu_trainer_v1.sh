# Sourced by prime_rl_side/install/cpu_trainer.sh for GENERATION=v1 (prime-rl main, e.g. 559b447), after
# orchestrator_venv.sh built $VENV (set -euo pipefail; `say`, `die`, $DIR, $AIR_DIR, $VENV set; $PY
# may be). Adds what main's own trainer entry point (prime_rl.trainer.rl.train, run on the CPU by
# air_prime_rl.v1.trainer in prime_rl_side/) needs beyond the orchestrator's venv:
#   - the trainer's packages at the versions of main's uv.lock (as constraints). The orchestrator venv
#     already holds main's dependencies less the GPU-only ones, so this normally installs nothing; torch
#     stays the orchestrator venv's CPU build;
#   - import-only stand-ins on the venv's path, after site-packages (prime_rl_side/stand_ins/cpu): dion (main's
#     optimizer module imports `dion.Muon` at load; the rehearsal trains with AdamW), flash_attn and vLLM's
#     NCCL classes. tilelang (sparse-MLA kernels) is imported only by DeepSeek-style models: not needed.
#     flash-attn 2's varlen call is computed by air_prime_rl.sdpa_varlen at run time (not installed).
# Idempotent: a venv where the trainer already imports is only checked.

PY=${PY:-"$VENV/bin/python"}
# Imported by prime_rl.trainer.rl.train (and the model, optimizer, loss and broadcast code it loads) beyond
# the orchestrator's closure; ring-flash-attn only for context parallelism (cp > 1), kept for parity.
V1_TRAINER_PACKAGES=(beartype jaxtyping tyro torchdata msgspec tenacity setproctitle orjson safetensors
    ring-flash-attn)
# ring-flash-attn asks for flash-attn (CUDA; a stand-in here).
V1_TRAINER_NO_DEPS='^(ring-flash-attn)$'
V1_TRAINER_CHECK='import prime_rl.trainer.rl.train, prime_rl.orchestrator.orchestrator, prime_rl.entrypoints.env_server
import air_mlgym, torchtitan, dion, flash_attn
import air_prime_rl.v1.trainer, air_prime_rl.v1.cpu, air_prime_rl.cpu_torch, air_prime_rl.sdpa_varlen
from prime_rl.configs.trainer import TrainerConfig'

[[ -x "$PY" ]] || die "no Python in $VENV (orchestrator_venv.sh builds it first)"
install_air_side "$PY" 1 # air_prime_rl and the stand-ins (orchestrator_venv.sh)

if "$PY" -c "$V1_TRAINER_CHECK" >/dev/null 2>&1; then
    say "main's trainer already imports in $VENV (CPU trainer ready)"
else
    v1_work=$(mktemp -d)
    say "reading prime-rl's uv.lock for the trainer's versions"
    read_trainer_lock "$DIR" "$v1_work" # (cpu_trainer.sh; torchtitan came with the orchestrator's venv)
    say "installing main's trainer packages at its uv.lock versions: ${V1_TRAINER_PACKAGES[*]}"
    install_trainer_packages "$v1_work" "$V1_TRAINER_NO_DEPS" "${V1_TRAINER_PACKAGES[@]}"
    rm -rf "$v1_work"
fi

v1_report=$("$PY" -c "$V1_TRAINER_CHECK" 2>&1) ||
    die "prime-rl main's trainer does not import in $VENV: $(tail -n 3 <<<"$v1_report")"
echo "    prime_rl.trainer.rl.train imports in $VENV (on the CPU: air_prime_rl.v1.trainer runs it)"
