#!/usr/bin/env bash
# Runs prime-rl's own trainer (both pins: c87c19b, 559b447) for 3 steps on the recorded rehearsal batches, on
# the GPU machine, offline, from gpu-bundle/ (built by scripts/gpu_trainer_bundle.sh). From the repository root:
#
#   bash scripts/gpu_trainer_check.sh gpu-bundle $OUT
#
# Per pin: a venv on top of the machine's Python (its site-packages on the path: torch, numpy, ...), the pin's
# wheels installed offline with no deps, a .pth with the pin's prime-rl src, torchtitan, this repository and the
# import-only stand-ins; derive/adapt the trainer config (device "cuda"); torchrun the trainer entry for 3
# steps (timeout 240 s); then scripts/gpu_trainer_check.py writes $OUT/<pin>.json (steps, fixed sample, GPU,
# torch, wall times). Logs go to $OUT/<pin>-*.log. A failing pin does not stop the next; exit 1 if any failed.
#
# Environment: GPU_BASE_PYTHON (default /opt/torch/.venv/bin/python) the Python to build on;
# GPU_CHECK_DEVICE (default cuda) the device the configs are derived for (cpu: a local rehearsal of this
# script); GPU_CHECK_TIMEOUT (default 240) seconds per trainer run; GPU_CHECK_PINS (default "c87 v1");
# GPU_CHECK_SCRATCH (default a new temporary folder, removed at the end) where the venvs and the run folders go;
# C87_RL_TOML (default configs/mlgym/rl_2gpu.toml, what the recorded c87 batches were made with).
set -euo pipefail

BUNDLE=$(realpath "${1:?usage: $0 BUNDLE_DIR OUT_DIR}")
OUT=$(realpath -m "${2:?usage: $0 BUNDLE_DIR OUT_DIR}")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE_PYTHON=${GPU_BASE_PYTHON:-/opt/torch/.venv/bin/python}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
TIMEOUT=${GPU_CHECK_TIMEOUT:-240}
PINS=${GPU_CHECK_PINS:-"c87 v1"}
C87_RL_TOML=${C87_RL_TOML:-configs/mlgym/rl_2gpu.toml} # the rl config c87c19b's trainer config is derived from
SCRATCH=${GPU_CHECK_SCRATCH:-$(mktemp -d /tmp/gpu-trainer-check.XXXXXX)}
mkdir -p "$OUT" "$SCRATCH"
cd "$ROOT"

# Offline, no W&B, no tokenizer threads fighting the trainer (as air/rehearsal/launch.py's entry_env).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export OPENAI_API_KEY=rehearsal VLLM_API_KEY=rehearsal UV_OFFLINE=1 PIP_NO_INDEX=1

say() { echo "[$(date -u +%H:%M:%S)] $*"; }
now() { date +%s.%N; }
since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.1f", end - start }'; }

say "base Python $BASE_PYTHON ($("$BASE_PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'))"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/nvidia-smi.txt" 2>&1 || true

# A venv for one pin: the pin's wheels first, then its sources, torchtitan and this repository, then the base
# Python's own site-packages, then the stand-ins. (Not --system-site-packages: /opt/torch/.venv is itself a venv,
# whose "system" site-packages would be the bare interpreter's, without torch.)
make_venv() {
    local pin=$1 work=$2 venv=$2/venv site base_sites
    base_sites=$("$BASE_PYTHON" -c 'import site; print(" ".join(site.getsitepackages()))') || return 1
    # (Called in an `||` list, where set -e is off: each step returns on failure itself.)
    if command -v uv >/dev/null; then
        uv venv --quiet -p "$BASE_PYTHON" "$venv" || return 1
        uv pip install --quiet --python "$venv/bin/python" --offline --no-index --no-deps \
            "$BUNDLE/$pin"/wheels/*.whl || return 1
    else
        "$BASE_PYTHON" -m venv "$venv" || return 1 # ensurepip: offline
        "$venv/bin/python" -m pip install --quiet --no-index --no-deps "$BUNDLE/$pin"/wheels/*.whl || return 1
    fi
    mkdir -p "$work/src" "$work/titan" "$work/data"
    tar -xzf "$BUNDLE/$pin/src.tar.gz" -C "$work/src" || return 1
    tar -xzf "$BUNDLE/$pin/torchtitan.tar.gz" -C "$work/titan" || return 1
    tar -xzf "$BUNDLE/$pin/batches.tar.gz" -C "$work/data" || return 1
    tar -xzf "$BUNDLE/tiny-model.tar.gz" -C "$work" || return 1 # a copy per pin: prime-rl writes prime/ into it
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
    {
        if [[ $pin == c87 ]]; then
            echo "$work/src"
        else
            echo "$work/src/src"
            echo "$work/src/packages/prime-rl-configs/src"
        fi
        echo "$work/titan"
        echo "$ROOT"
        echo "$ROOT/prime_rl_side" # air_prime_rl: the trainer entries, as install_prime_rl.sh installs them
        # The base's site-packages (their own .pth files processed too), after the pin's wheels.
        local dir
        for dir in $base_sites; do echo "import site; site.addsitedir('$dir')"; done
        echo "$ROOT/prime_rl_side/stand_ins/gpu"
        echo "$ROOT/prime_rl_side/stand_ins/cpu" # flash_attn (+ dist-info), vLLM's NCCL classes, dion
    } >"$site/zz_air_gpu_check.pth"
}

# One pin: venv, config, 3 trainer steps, then the JSON. Returns non-zero when anything failed.
run_pin() {
    local pin=$1 work=$SCRATCH/$1 started derive_s train_s rc=0 py model run_dir config
    rm -rf "$work"
    mkdir -p "$work"
    say "$pin: building its venv in $work"
    make_venv "$pin" "$work" >"$OUT/$pin-venv.log" 2>&1 || { say "$pin: venv failed (see $pin-venv.log)"; return 1; }
    py=$work/venv/bin/python
    model=$work/$(cat "$BUNDLE/tiny-model.name")
    if [[ $pin == c87 ]]; then
        run_dir=$work/data/run_default
        config=$work/trainer.toml
        printf '{"model_dir": "%s", "output_dir": "%s", "max_steps": 3, "device": "%s"}\n' \
            "$model" "$work/data" "$DEVICE" >"$work/overrides.json"
        started=$(now)
        "$py" -m air_prime_rl.classic.trainer derive "$C87_RL_TOML" "$work/overrides.json" "$config" \
            >"$OUT/$pin-derive.log" 2>&1 || rc=$?
        entry=air_prime_rl.classic.trainer
    else
        run_dir=$work/data/run
        config=$work/trainer-rehearsal.json
        printf '{"model_dir": "%s", "output_dir": "%s", "max_steps": 3, "device": "%s"}\n' \
            "$model" "$run_dir" "$DEVICE" >"$work/overrides.json"
        started=$(now)
        "$py" -m air_prime_rl.v1.trainer adapt "$work/data/configs/trainer.json" "$work/overrides.json" \
            "$config" >"$OUT/$pin-derive.log" 2>&1 || rc=$?
        entry=air_prime_rl.v1.trainer
    fi
    derive_s=$(since "$started")
    if ((rc != 0)); then
        say "$pin: deriving the trainer config failed ($rc); tail of $pin-derive.log:"
        tail -n 15 "$OUT/$pin-derive.log"
        return 1
    fi
    cp "$config" "$OUT/$pin-$(basename "$config")"
    say "$pin: training 3 steps (device $DEVICE, timeout ${TIMEOUT}s)"
    started=$(now)
    timeout --kill-after=20 "$TIMEOUT" "$py" -m torch.distributed.run --standalone --nproc-per-node=1 \
        -m "$entry" train "$config" "$work/trainer-steps.jsonl" >"$OUT/$pin-trainer.log" 2>&1 || rc=$?
    train_s=$(since "$started")
    say "$pin: trainer exited $rc after ${train_s}s"
    ((rc == 0)) || tail -n 25 "$OUT/$pin-trainer.log"
    # The trainer's own logs and the probe come back too.
    cp "$work/trainer-steps.jsonl" "$OUT/$pin-trainer-steps.jsonl" 2>/dev/null || true
    if [[ -d "$run_dir/logs" ]]; then
        mkdir -p "$OUT/$pin-logs"
        cp -r "$run_dir/logs/." "$OUT/$pin-logs/" 2>/dev/null || true
    fi
    ls -R "$run_dir/broadcasts" >"$OUT/$pin-broadcasts.txt" 2>&1 || true
    "$py" scripts/gpu_trainer_check.py --pin "$pin" --probe "$work/trainer-steps.jsonl" --run-dir "$run_dir" \
        --model "$model" --out "$OUT/$pin.json" --rc "$rc" --derive-s "$derive_s" --train-s "$train_s" \
        --device "$DEVICE" 2>&1 | tee "$OUT/$pin-check.log"
    return "${PIPESTATUS[0]}"
}

failed=()
for pin in $PINS; do
    if [[ ! -d "$BUNDLE/$pin" ]]; then
        say "$pin: not in $BUNDLE"
        failed+=("$pin")
        continue
    fi
    run_pin "$pin" || failed+=("$pin")
done
if [[ -z ${GPU_CHECK_SCRATCH:-} ]]; then rm -rf "$SCRATCH"; fi
if ((${#failed[@]})); then
    say "FAILED: ${failed[*]} (logs and JSON in $OUT)"
    exit 1
fi
say "all pins passed ($PINS); JSON and logs in $OUT"
