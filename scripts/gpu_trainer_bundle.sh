#!/usr/bin/env bash
# Builds gpu-bundle/ (ignored by git): what prime-rl's own trainer needs, for both pins, on a GPU machine that
# has torch, transformers & co. but no network and none of prime-rl's own dependencies. Runs HERE (PyPI
# reachable, the prime-rl checkouts and the recorded rehearsal batches on disk); the GPU machine then runs
#   bash scripts/gpu_trainer_check.sh gpu-bundle $OUT
#
#   bash scripts/gpu_trainer_bundle.sh [--python-version 3.12] [--out gpu-bundle] [--cpu-sized N]
#
# gpu-bundle/
#   c87/wheels/, v1/wheels/   manylinux x86_64 wheels (no deps) of what each pin's trainer imports that the GPU
#                             machine lacks or has at another version (versions: the pin's own venv here)
#   c87/src.tar.gz            prime-rl c87c19b's src/ (prime_rl)
#   v1/src.tar.gz             prime-rl 559b447's src/ and packages/prime-rl-configs/src (prime_rl, prime_rl.configs)
#   <pin>/torchtitan.tar.gz   the torchtitan package each pin's venv imports
#   c87/batches.tar.gz        run_default/{control/orch.toml, rollouts/step_k/rollouts.bin}
#   v1/batches.tar.gz         configs/trainer.json, run/rollouts/step_k/rank_0.bin
#   tiny-model.tar.gz         the project's tiny model
# Neither the trainer entries (prime_rl_side/air_prime_rl) nor the import-only stand-ins
# (prime_rl_side/stand_ins/{cpu,gpu}) are bundled: they travel in the working tree, and gpu_trainer_check.sh
# puts them on the check's path.
#
# --python-version 3.11 downloads cp311 wheels, for a local rehearsal of the GPU run on this CPU
# (GPU_BASE_PYTHON=... bash scripts/gpu_trainer_check.sh). --cpu-sized N keeps only the first N samples of
# each c87 batch (a full c87 step takes ~12 minutes on 2 CPU cores); never for the GPU bundle.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYVER=3.12
OUT="$ROOT/gpu-bundle"
CPU_SIZED=0
while (($#)); do
    case $1 in
    --python-version) PYVER=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --cpu-sized) CPU_SIZED=$2; shift 2 ;;
    *) echo "usage: $0 [--python-version 3.12] [--out DIR] [--cpu-sized N]" >&2; exit 2 ;;
    esac
done

# Where the pins and the recorded batches are on this machine (override with the environment).
PRL_C87=${PRL_C87:-/tmp/prl-c87}
PRL_V1=${PRL_V1:-/tmp/prl-v1}
C87_RUN=${C87_RUN:-/tmp/work/fin-c87-3/run_default} # holds control/orch.toml and rollouts/step_k/rollouts.bin
V1_RUN=${V1_RUN:-/tmp/work/reh-v1-c}                # holds configs/trainer.json and run/rollouts/step_k/rank_0.bin
TINY_MODEL=${TINY_MODEL:-$HOME/.cache/air/tiny-model}
for variable in PRL_C87 PRL_V1 C87_RUN V1_RUN TINY_MODEL; do
    [[ -d "${!variable}" ]] || { echo "error: $variable=${!variable} is not a folder: set $variable (the top of this script says what each is: an
       install_prime_rl.sh --cpu-trainer checkout per pin, a run folder of air rehearse per pin, the tiny model)" >&2; exit 1; }
done

# What each pin's trainer imports (derive/adapt + train) beyond the GPU machine's packages, or at a version the
# GPU machine does not have (found by running both trainers in a venv holding only the GPU machine's packages).
# The versions are read from the pin's own venv.
C87_PACKAGES=(pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv
    typing-extensions loguru beartype tomli tomli-w msgspec pyzmq torchdata tyro shtab docstring-parser
    typeguard ring-flash-attn transformers tokenizers huggingface-hub safetensors tenacity
    jaxtyping wadler-lindig)
V1_PACKAGES=(pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv
    typing-extensions loguru beartype tomli tomli-w msgspec pyzmq torchdata tyro docstring-parser
    typeguard ring-flash-attn transformers tokenizers huggingface-hub safetensors tenacity
    jaxtyping wadler-lindig prime-pydantic-config orjson setproctitle nvidia-ml-py)

# pip for `pip download` (the machine's python3 has it; else uv provides one).
if python3 -m pip --version >/dev/null 2>&1; then
    PIP=(python3 -m pip)
else
    PIP=(uv run --no-project --with pip python -m pip)
fi

# The wheels of one pin: name==version from its venv, cp$PYVER manylinux x86_64 (or pure Python), no deps.
download_wheels() {
    local venv_python=$1 dir=$2
    shift 2
    local freeze requirement package version
    freeze=$(uv pip freeze --python "$venv_python")
    mkdir -p "$dir"
    for package in "$@"; do
        version=$(grep -i "^${package//-/[-_]}==" <<<"$freeze" | head -n 1 | cut -d= -f3 || true)
        [[ -n "$version" ]] || { echo "no $package in $venv_python" >&2; exit 1; }
        requirement="$package==$version"
        "${PIP[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
            --python-version "$PYVER" --implementation cp \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
            --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
            -d "$dir" "$requirement" 2> >(grep -v "is neither a file nor a directory" >&2)
        echo "$requirement" >>"$dir/../requirements.txt"
    done
}

# A tar.gz of one installed package folder (torchtitan as the pin's venv imports it).
package_tar() {
    local venv_python=$1 module=$2 tarball=$3 folder
    folder=$(dirname "$("$venv_python" -c "import $module, sys; print($module.__file__)")")
    tar -czf "$tarball" --exclude=__pycache__ -C "$(dirname "$folder")" "$(basename "$folder")"
}

rm -rf "$OUT"
mkdir -p "$OUT/c87" "$OUT/v1"
echo "== wheels for Python $PYVER (c87c19b: ${#C87_PACKAGES[@]}, 559b447: ${#V1_PACKAGES[@]})"
download_wheels "$PRL_C87/.venv-cpu/bin/python" "$OUT/c87/wheels" "${C87_PACKAGES[@]}"
download_wheels "$PRL_V1/.venv-cpu/bin/python" "$OUT/v1/wheels" "${V1_PACKAGES[@]}"

echo "== prime-rl sources and torchtitan"
tar -czf "$OUT/c87/src.tar.gz" --exclude=__pycache__ -C "$PRL_C87/src" prime_rl
tar -czf "$OUT/v1/src.tar.gz" --exclude=__pycache__ -C "$PRL_V1" src/prime_rl packages/prime-rl-configs/src
package_tar "$PRL_C87/.venv-cpu/bin/python" torchtitan "$OUT/c87/torchtitan.tar.gz"
package_tar "$PRL_V1/.venv-cpu/bin/python" torchtitan "$OUT/v1/torchtitan.tar.gz"
for pin in c87 v1; do
    checkout=$PRL_C87
    [[ $pin == v1 ]] && checkout=$PRL_V1
    git -C "$checkout" rev-parse HEAD >"$OUT/$pin/commit" 2>/dev/null || echo unknown >"$OUT/$pin/commit"
done

echo "== recorded batches and the tiny model"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/c87/run_default/control" "$stage/v1/configs"
cp "$C87_RUN/control/orch.toml" "$stage/c87/run_default/control/"
for step in "$C87_RUN"/rollouts/step_*; do
    mkdir -p "$stage/c87/run_default/rollouts/$(basename "$step")"
    cp "$step/rollouts.bin" "$stage/c87/run_default/rollouts/$(basename "$step")/"
done
if ((CPU_SIZED > 0)); then
    # Local CPU test only: the first N samples of each step (msgpack [examples, step, ...]).
    "$PRL_C87/.venv-cpu/bin/python" - "$CPU_SIZED" "$stage"/c87/run_default/rollouts/step_*/rollouts.bin <<'PY'
import sys, msgpack
keep = int(sys.argv[1])
for path in sys.argv[2:]:
    raw = msgpack.unpackb(open(path, "rb").read(), raw=False, strict_map_key=False)
    raw[0] = raw[0][:keep]
    open(path, "wb").write(msgpack.packb(raw, use_bin_type=True))
PY
    echo "   c87 batches cut to $CPU_SIZED samples per step (--cpu-sized: a CPU test, not a GPU bundle)"
    echo "$CPU_SIZED" >"$OUT/c87/cpu-sized"
fi
cp "$V1_RUN/configs/trainer.json" "$stage/v1/configs/"
for step in "$V1_RUN"/run/rollouts/step_*; do
    mkdir -p "$stage/v1/run/rollouts/$(basename "$step")"
    cp "$step"/rank_*.bin "$stage/v1/run/rollouts/$(basename "$step")/"
done
tar -czf "$OUT/c87/batches.tar.gz" -C "$stage/c87" run_default
tar -czf "$OUT/v1/batches.tar.gz" -C "$stage/v1" configs run
# The tiny model, readable by both pins' transformers whichever version wrote it (air.serving.models.tiny_model).
cp -r "$TINY_MODEL" "$stage/$(basename "$TINY_MODEL")"
rm -rf "$stage/$(basename "$TINY_MODEL")/prime" # what a trainer wrote into it
(cd "$ROOT" && uv run --quiet python -c 'import sys; from pathlib import Path
from air.serving.models.tiny_model import readable_by_older_transformers as fix; fix(Path(sys.argv[1]))' \
    "$stage/$(basename "$TINY_MODEL")")
tar -czf "$OUT/tiny-model.tar.gz" -C "$stage" "$(basename "$TINY_MODEL")"
echo "$(basename "$TINY_MODEL")" >"$OUT/tiny-model.name"
echo "$PYVER" >"$OUT/python-version"

echo "== gpu-bundle"
du -sh "$OUT"/c87/wheels "$OUT"/v1/wheels "$OUT"/*/*.tar.gz "$OUT"/*.tar.gz | sed 's|'"$OUT"'/||'
total=$(du -sb "$OUT" | cut -f1)
echo "total: $((total / 1024 / 1024)) MiB ($total bytes) in $OUT"
((total < 60 * 1024 * 1024)) || { echo "the bundle is over 60 MiB" >&2; exit 1; }
