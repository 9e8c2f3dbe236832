# Sourced by install_prime_rl.sh --orchestrator-only once prime-rl is checked out at the pin in $DIR.
# Builds $DIR/.venv-orchestrator: what prime_rl.orchestrator imports (read off its import closure at
# c87c19b: no vLLM, liger, flash-attn or torchtitan there), at the versions of prime-rl's uv.lock.
# Idempotent: a venv that already imports everything is only checked.

VENV="$DIR/.venv-orchestrator"
# prime-rl declares Python 3.12; its orchestrator also runs on 3.11, the only one some machines have (and uv
# may not be able to download another): take 3.12 where uv finds one on this machine, else 3.11.
if [[ -n "${PRIME_RL_PYTHON:-}" ]]; then
    PY_WANTED=$PRIME_RL_PYTHON
elif UV_PYTHON_DOWNLOADS=never uv python find 3.12 >/dev/null 2>&1; then
    PY_WANTED=3.12
elif UV_PYTHON_DOWNLOADS=never uv python find 3.11 >/dev/null 2>&1; then
    PY_WANTED=3.11
    echo "    no Python 3.12 on this machine: using 3.11 (set PRIME_RL_PYTHON to choose another)"
else
    die "neither Python 3.12 nor 3.11 found (install one, or set PRIME_RL_PYTHON to an interpreter path)"
fi
CPU_INDEX=https://download.pytorch.org/whl/cpu
# Imported by prime_rl.orchestrator.orchestrator and what it pulls in (torch is installed on its own).
ORCHESTRATOR_PACKAGES=(
    transformers tokenizers huggingface-hub datasets pandas numpy openai httpx pydantic pydantic-settings
    tomli tomli-w msgspec pyzmq msgpack wandb loguru rich tenacity requests aiolimiter aiofiles pillow
    prime-evals openai-agents tqdm jinja2
)
IMPORT_CHECK='import prime_rl.orchestrator.orchestrator, air_mlgym, transformers, torch, verifiers
print(verifiers.__version__, torch.__version__)'

orchestrator_ready() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "$IMPORT_CHECK" >/dev/null 2>&1
}

if orchestrator_ready; then
    say "orchestrator venv $VENV already imports prime-rl's orchestrator and air_mlgym"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT

    say "reading prime-rl's uv.lock for versions"
    # Registry packages as constraints (==version); git sources apart: verifiers is the one we need.
    python3 - "$DIR/uv.lock" "$work/constraints.txt" "$work/verifiers.txt" "$work/torch.txt" <<'PY' || die "cannot read $DIR/uv.lock"
import sys, tomllib
lock = tomllib.load(open(sys.argv[1], "rb"))
packages = lock.get("package", [])
names = [package["name"] for package in packages]
verifiers = torch = None
pins = []
for package in packages:
    name, source = package["name"], package.get("source", {})
    if name == "torch":  # not a constraint: the CPU build is chosen below
        torch = torch or package["version"].split("+")[0]  # "2.9.1+cu128": the CUDA build's local tag
    elif name == "verifiers" and "git" in source:
        verifiers = source["git"].rsplit("#", 1)[1]
    # Not pinned: torch's own build stack (it comes with whichever torch is installed), and packages the
    # lock holds at several versions under markers a plain constraint cannot carry (triton is one).
    elif "registry" in source and names.count(name) == 1 and not name.startswith(("nvidia-", "triton", "cuda-")):
        pins.append(f"{name}=={package['version']}")
if verifiers is None or torch is None:
    sys.exit("no git source for verifiers, or no torch, in uv.lock")
open(sys.argv[2], "w").write("\n".join(sorted(pins)) + "\n")
open(sys.argv[3], "w").write(verifiers + "\n")
open(sys.argv[4], "w").write(torch + "\n")
PY
    VERIFIERS_COMMIT=$(cat "$work/verifiers.txt")
    VERIFIERS_REPO=${VERIFIERS_REPO:-https://github.com/PrimeIntellect-ai/verifiers.git}
    echo "    $(wc -l <"$work/constraints.txt") pinned packages; verifiers at ${VERIFIERS_COMMIT:0:12} from $VERIFIERS_REPO"

    say "creating $VENV (Python $PY_WANTED)"
    UV_PYTHON_DOWNLOADS=${UV_PYTHON_DOWNLOADS:-never} uv venv --quiet --allow-existing --python "$PY_WANTED" "$VENV" ||
        die "no Python $PY_WANTED for uv (set PRIME_RL_PYTHON to an interpreter path or version; 3.11 and 3.12 work)"
    PY="$VENV/bin/python"
    version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [[ "$version" == 3.12 ]] || echo "    note: prime-rl declares Python 3.12; its orchestrator also runs on $version"

    say "installing torch (CPU)"
    if "$PY" -c 'import torch' 2>/dev/null; then
        echo "    torch $("$PY" -c 'import torch; print(torch.__version__)') already there"
    elif [[ -n "${PRIME_RL_TORCH:-}" ]]; then
        uv pip install --quiet --python "$PY" "$PRIME_RL_TORCH" || die "cannot install PRIME_RL_TORCH=$PRIME_RL_TORCH"
    else
        torch_pin=$(cat "$work/torch.txt")
        if curl -fsS --max-time 10 -o /dev/null "$CPU_INDEX/torch/" 2>/dev/null; then
            uv pip install --quiet --python "$PY" --index-url "$CPU_INDEX" "torch==$torch_pin" ||
                die "cannot install torch==$torch_pin from $CPU_INDEX"
        else
            echo "    $CPU_INDEX is out of reach: torch $torch_pin from PyPI, with its CUDA libraries (a few GB)."
            echo "    (Set PRIME_RL_TORCH to a CPU wheel or requirement to avoid that.)"
            uv pip install --quiet --python "$PY" "torch==$torch_pin" || die "cannot install torch==$torch_pin"
        fi
    fi

    say "installing the orchestrator's dependencies and verifiers ${VERIFIERS_COMMIT:0:12}"
    uv pip install --quiet --python "$PY" --constraint "$work/constraints.txt" "${ORCHESTRATOR_PACKAGES[@]}" \
        "verifiers @ git+$VERIFIERS_REPO@$VERIFIERS_COMMIT" ||
        die "installing the orchestrator's dependencies failed (VERIFIERS_REPO=$VERIFIERS_REPO reachable?)"

    say "putting prime-rl's source on the venv's path (no install: its pyproject pins vLLM and CUDA torch)"
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$DIR/src" >"$site/prime_rl_source.pth"

    say "installing air-agent[tiny] (editable)"
    uv pip install --quiet --python "$PY" --constraint "$work/constraints.txt" -e "$AIR_DIR[tiny]" ||
        die "uv pip install -e $AIR_DIR[tiny] failed"
fi

report=$("$VENV/bin/python" -c "$IMPORT_CHECK" 2>&1) ||
    die "the orchestrator venv does not import everything: $(tail -n 3 <<<"$report")"
read -r verifiers_version torch_version <<<"$(tail -n 1 <<<"$report")"
echo "    prime_rl.orchestrator and air_mlgym import; verifiers $verifiers_version, torch $torch_version"

cat <<EOF

Done. prime-rl's orchestrator (at ${head:0:12}) runs from $VENV, on the CPU.
Rehearse a training run before booking GPUs:

  $VENV/bin/air rehearse --config $AIR_DIR/configs/mlgym/rl_2gpu.toml --steps 3 --prime-rl $DIR
EOF
