# Sourced by install_prime_rl.sh --orchestrator-only once prime-rl is checked out in $DIR ($GENERATION set).
# Builds $DIR/.venv-cpu: what prime-rl's orchestrator (and, today's, its env server) imports,
# without vLLM, flash-attn, torchtitan or CUDA torch, at the versions of prime-rl's uv.lock.
#   classic (c87c19b): the packages below (its orchestrator's import closure), verifiers from the lock's git
#       source.
#   v1 (today's): prime-rl's own dependencies less the GPU-only ones, torchtitan from the lock's git revision
#       (PRIME_RL_TORCHTITAN may name a requirement or a path instead); verifiers, renderers and
#       prime-pydantic-config are submodules there: taken from deps/ when checked out, else verifiers from
#       VERIFIERS_REPO at the submodule's commit and the other two from PyPI (said); prime-rl-configs put on
#       the path from the checkout, like prime-rl's source (both declare Python 3.12 only).
# Both: this checkout's side of the rehearsal, prime_rl_side/ (package air_prime_rl, editable; the import-only
# stand-ins on the path where needed): install_air_side.
# Idempotent: a venv that already imports everything is only checked.

VENV="$DIR/.venv-cpu"
# A source archive lacks today's prime-rl's submodules renderers and pydantic-config: PyPI's releases instead, at
# the ones this project ran that commit with (the submodules' own versions are not in prime-rl's lock).
declare -A CHECKED_RELEASES=([559b447]="renderers==0.1.12 prime-pydantic-config==0.4.3")
AIR_SIDE="$AIR_DIR/prime_rl_side"     # what air rehearse runs in prime-rl's venv: package air_prime_rl
CPU_STAND_INS="$AIR_SIDE/stand_ins/cpu" # import-only flash_attn, vLLM's NCCL classes, dion

# PY gets package air_prime_rl from this checkout (editable) and, where WANT_STAND_INS is 1 or the venv had them
# (a venv built before they moved from scripts/cpu_stand_ins), the stand-ins after site-packages (zz_: a real
# flash-attn, vLLM or dion would win). Idempotent: only what is missing or points elsewhere is redone.
install_air_side() { # PY WANT_STAND_INS
    local py=$1 want=$2 site pth
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || die "no Python at $py"
    pth=$site/zz_air_cpu_stand_ins.pth
    if [[ $want == 1 || -f $pth ]] && [[ "$(cat "$pth" 2>/dev/null)" != "$CPU_STAND_INS" ]]; then
        say "putting the import-only stand-ins (flash_attn, vLLM's NCCL classes, dion) on $py's path"
        echo "$CPU_STAND_INS" >"$pth"
    fi
    if ! "$py" -c 'import sys, air_prime_rl; sys.exit(not air_prime_rl.__file__.startswith(sys.argv[1]))' \
        "$AIR_SIDE/" 2>/dev/null; then
        say "installing air_prime_rl (editable, $AIR_SIDE): what air rehearse runs in prime-rl's venv"
        uv pip install --quiet --python "$py" --no-deps -e "$AIR_SIDE" || die "uv pip install -e $AIR_SIDE failed"
    fi
}
# prime-rl declares Python 3.12; its orchestrator also runs on 3.11, the only one some machines have (and uv
# may not be able to download another): take 3.12 where uv finds one on this machine, else 3.11.
if [[ -n "${PRIME_RL_PYTHON:-}" ]]; then
    PY_WANTED=$PRIME_RL_PYTHON
elif UV_PYTHON_DOWNLOADS=never uv python find 3.12 >/dev/null 2>&1; then
    PY_WANTED=3.12
elif command -v pyenv >/dev/null && compgen -G "$(pyenv root)/versions/3.12*/bin/python3.12" >/dev/null; then
    PY_WANTED=$(compgen -G "$(pyenv root)/versions/3.12*/bin/python3.12" | sort -V | tail -n 1) # uv misses pyenv's
elif [[ ${CPU_RL:-0} == 1 ]]; then
    die "prime-rl's own commands need Python 3.12 (its package declares ~=3.12), and none was found (PRIME_RL_PYTHON)"
elif UV_PYTHON_DOWNLOADS=never uv python find ">=3.11.4,<3.12" >/dev/null 2>&1; then
    # 3.11.4 and later, as air-agent requires (Debian 12's own 3.11.2 lacks tarfile's extraction filters)
    PY_WANTED=">=3.11.4,<3.12"
    echo "    no Python 3.12 on this machine: using 3.11 (set PRIME_RL_PYTHON to choose another)"
else
    die "neither Python 3.12 nor 3.11.4+ found (install one, or set PRIME_RL_PYTHON to an interpreter path)"
fi
CPU_INDEX=https://download.pytorch.org/whl/cpu
# Imported by prime_rl.orchestrator.orchestrator and what it pulls in (torch is installed on its own).
ORCHESTRATOR_PACKAGES=(
    transformers tokenizers huggingface-hub datasets pandas numpy openai httpx pydantic pydantic-settings
    tomli tomli-w msgspec pyzmq msgpack wandb loguru rich tenacity requests aiolimiter aiofiles pillow
    prime-evals openai-agents tqdm jinja2
)
# Today's prime-rl: its dependencies that need a GPU, a CUDA build, Python 3.12 or a git host, left out.
# (torchtitan, a git source, comes below; flash-attn and vLLM's NCCL classes, imported at load by its
# orchestrator, get import-only stand-ins: prime_rl_side/stand_ins/cpu.)
GPU_ONLY='^(vllm|vllm-router|flash-attn.*|flash_attn.*|torchtitan|tilelang|dion|deep-ep|deep-gemm|nixl.*|mooncake-transfer-engine|torchvision|torchaudio|liger-kernel|prime-kernels)$'
# Installed without their dependencies: modelexpress 0.3.0 (imported by today's orchestrator) asks for
# protobuf < 6, prime-sandboxes for >= 6.31; its generated code runs on protobuf 6. Its other needs that
# the orchestrator reaches (grpcio) are installed as usual; nixl (CUDA) is not. prometheus-client and
# triton come to prime-rl with vLLM and CUDA torch; its orchestrator imports both (triton imports on a CPU).
NO_DEPS='^(modelexpress)$'
V1_EXTRA_PACKAGES=(grpcio prometheus-client triton)
IMPORT_CHECK='import prime_rl.orchestrator.orchestrator, air_mlgym, air_prime_rl.classic.entry, transformers, torch
import verifiers
print(verifiers.__version__, torch.__version__)'
if [[ $GENERATION == v1 ]]; then
    IMPORT_CHECK='import prime_rl.orchestrator.orchestrator, prime_rl.entrypoints.env_server, prime_rl.configs.rl
import air_mlgym, air_prime_rl.v1.entry, transformers, torch, verifiers
air_mlgym.MLGymTaskset
print(verifiers.__version__, torch.__version__)'
fi

orchestrator_ready() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "$IMPORT_CHECK" >/dev/null 2>&1
}

# A venv from an earlier run: this checkout's side brought up to date first (cheap), then checked as a whole.
[[ ! -x "$VENV/bin/python" ]] || install_air_side "$VENV/bin/python" "$([[ $GENERATION == v1 ]] && echo 1 || echo 0)"
if orchestrator_ready; then
    say "orchestrator venv $VENV already has what it needs (air_mlgym imports there)"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT

    say "reading prime-rl's uv.lock for versions"
    # Registry packages as constraints (==version); git and path sources apart (verifiers among them).
    python3 - "$DIR" "$work" "$GENERATION" "$GPU_ONLY" "$NO_DEPS" <<'PY' || die "cannot read $DIR/uv.lock"
import re, sys, tomllib
from pathlib import Path
root, work, generation = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
gpu_only, no_deps = re.compile(sys.argv[4]), re.compile(sys.argv[5])
lock = tomllib.load(open(root / "uv.lock", "rb"))
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
    elif name == "verifiers" and "editable" in source:
        verifiers = "submodule:" + source["editable"]
    elif name == "torchtitan" and "git" in source:  # today's prime-rl: a git revision no release has
        url, _, commit = source["git"].partition("#")
        (work / "torchtitan.txt").write_text(f"torchtitan @ git+{url.split('?')[0]}@{commit}\n")
    # Not pinned: torch's own build stack (it comes with whichever torch is installed), and packages the
    # lock holds at several versions under markers a plain constraint cannot carry (triton is one).
    elif "registry" in source and names.count(name) == 1 and not name.startswith(("nvidia-", "triton", "cuda-")):
        pins.append(f"{name}=={package['version']}")
    elif "registry" in source and not name.startswith(("nvidia-", "triton", "cuda-")):
        # held at several builds of one version (torchao: the registry's and a CUDA wheel): pin that version
        bases = {p["version"].split("+")[0] for p in packages if p["name"] == name}
        pin = f"{name}=={bases.pop()}"
        if not bases and pin not in pins:
            pins.append(pin)
if verifiers is None or torch is None:
    sys.exit("no source for verifiers, or no torch, in uv.lock")
(work / "constraints.txt").write_text("\n".join(sorted(pins)) + "\n")
(work / "verifiers.txt").write_text(verifiers + "\n")
(work / "torch.txt").write_text(torch + "\n")
if generation == "v1":  # prime-rl's own dependencies, less torch (below), the submodules and the GPU-only ones
    project = tomllib.load(open(root / "pyproject.toml", "rb"))["project"]
    local = {"torch", "verifiers", "renderers", "prime-pydantic-config", "prime-rl-configs"}
    wanted, alone = [], []
    for requirement in project["dependencies"]:
        name = re.split(r"[\s\[<>=!~;@]", requirement, maxsplit=1)[0].strip().lower()
        if name and name not in local and not gpu_only.match(name):
            (alone if no_deps.match(name) else wanted).append(name)
    (work / "packages.txt").write_text("\n".join(wanted) + "\n")
    pinned = {pin.split("==")[0]: pin for pin in pins}
    (work / "no-deps.txt").write_text("".join(pinned.get(name, name) + "\n" for name in alone))
PY
    VERIFIERS_COMMIT=$(cat "$work/verifiers.txt")
    VERIFIERS_REPO=${VERIFIERS_REPO:-https://github.com/PrimeIntellect-ai/verifiers.git}
    LOCAL_SOURCES=()
    if [[ $GENERATION == v1 ]]; then
        mapfile -t PACKAGES <"$work/packages.txt"
        # The submodules: checked out (git clone --recursive), or else from their sources named above.
        for sub in verifiers renderers pydantic-config; do
            if [[ -f "$DIR/deps/$sub/pyproject.toml" ]]; then
                LOCAL_SOURCES+=("$DIR/deps/$sub")
            elif [[ $sub == verifiers ]]; then
                commit=$(git -C "$DIR" ls-tree HEAD deps/verifiers | awk '{print $3}')
                [[ -n "$commit" ]] || die "$DIR has no deps/verifiers submodule"
                LOCAL_SOURCES+=("verifiers @ git+$VERIFIERS_REPO@$commit")
            else
                name=$([[ $sub == pydantic-config ]] && echo prime-pydantic-config || echo "$sub")
                checked=$(tr ' ' '\n' <<<"${CHECKED_RELEASES[${head:0:7}]:-}" | grep "^$name==" || true)
                if [[ -n "$checked" ]]; then
                    echo "    deps/$sub is not checked out: $checked from PyPI instead (the release checked at ${head:0:7})"
                    LOCAL_SOURCES+=("$checked")
                else
                    echo "    deps/$sub is not checked out: $name from PyPI instead (its newest release: unchecked here)"
                    LOCAL_SOURCES+=("$name")
                fi
            fi
        done
        if [[ -n "${PRIME_RL_TORCHTITAN:-}" ]]; then
            LOCAL_SOURCES+=("$PRIME_RL_TORCHTITAN")
        elif [[ -s "$work/torchtitan.txt" ]]; then
            LOCAL_SOURCES+=("$(cat "$work/torchtitan.txt")")
        fi
        VERIFIERS_COMMIT=${PRIME_RL_VERIFIERS_COMMIT:-$(git -C "$DIR" ls-tree HEAD deps/verifiers 2>/dev/null | awk '{print $3}')}
        echo "    $(wc -l <"$work/constraints.txt") pinned packages; ${#PACKAGES[@]} of prime-rl's dependencies"
    else
        PACKAGES=("${ORCHESTRATOR_PACKAGES[@]}")
        if [[ -n "${PRIME_RL_VERIFIERS:-}" ]]; then
            LOCAL_SOURCES+=("$PRIME_RL_VERIFIERS")
        else
            LOCAL_SOURCES+=("verifiers @ git+$VERIFIERS_REPO@$VERIFIERS_COMMIT")
        fi
        echo "    $(wc -l <"$work/constraints.txt") pinned packages; verifiers at ${VERIFIERS_COMMIT:0:12} from ${PRIME_RL_VERIFIERS:-$VERIFIERS_REPO}"
    fi

    say "creating $VENV (Python $PY_WANTED)"
    UV_PYTHON_DOWNLOADS=${UV_PYTHON_DOWNLOADS:-never} uv venv --quiet --allow-existing --python "$PY_WANTED" "$VENV" ||
        die "no Python $PY_WANTED for uv (set PRIME_RL_PYTHON to an interpreter path or version; 3.11.4+ and 3.12 work)"
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
    [[ $GENERATION == v1 ]] && PACKAGES+=("${V1_EXTRA_PACKAGES[@]}")
    uv pip install --quiet --python "$PY" --constraint "$work/constraints.txt" "${PACKAGES[@]}" "${LOCAL_SOURCES[@]}" ||
        die "installing the orchestrator's dependencies failed (VERIFIERS_REPO=$VERIFIERS_REPO reachable?)"
    if [[ -s "$work/no-deps.txt" ]]; then
        uv pip install --quiet --python "$PY" --no-deps -r "$work/no-deps.txt" ||
            die "cannot install $(tr '\n' ' ' <"$work/no-deps.txt")"
    fi

    say "putting prime-rl's source on the venv's path (no install: its pyproject pins vLLM and CUDA torch)"
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$DIR/src" >"$site/prime_rl_source.pth"
    [[ ! -d "$DIR/packages/prime-rl-configs/src" ]] || echo "$DIR/packages/prime-rl-configs/src" >>"$site/prime_rl_source.pth"

    say "installing air-mlgym[tiny] (editable)"
    uv pip install --quiet --python "$PY" --constraint "$work/constraints.txt" -e "$AIR_DIR[tiny]" ||
        die "uv pip install -e $AIR_DIR[tiny] failed"
    install_air_side "$PY" "$([[ $GENERATION == v1 ]] && echo 1 || echo 0)"

    # Compiled now, once: a first import that compiles torch, transformers and prime-rl from source took
    # 138 s on a loaded 2-core host (and never gets faster where PYTHONDONTWRITEBYTECODE is set).
    say "compiling bytecode (so that the orchestrator and env servers start in seconds)"
    "$PY" -m compileall -q -j 0 "$site" "$DIR/src" >/dev/null 2>&1 || echo "    (some files did not compile; they compile on import)"
    [[ ! -d "$DIR/packages/prime-rl-configs/src" ]] || "$PY" -m compileall -q -j 0 "$DIR/packages/prime-rl-configs/src" >/dev/null 2>&1 || true
fi

report=$("$VENV/bin/python" -c "$IMPORT_CHECK" 2>&1) ||
    die "the orchestrator venv does not import everything: $(tail -n 3 <<<"$report")"
read -r verifiers_version torch_version <<<"$(tail -n 1 <<<"$report")"
if [[ $GENERATION == v1 ]]; then
    echo "    prime-rl's orchestrator (flash-attn and vLLM's NCCL classes as import-only stand-ins), env server and"
    echo "    config models, and air_mlgym's v1 front import; verifiers $verifiers_version, torch $torch_version"
else
    echo "    prime_rl.orchestrator and air_mlgym import; verifiers $verifiers_version, torch $torch_version"
fi

[[ ${CPU_TRAINER:-0} == 1 ]] && return 0  # install_prime_rl.sh prints what to run once the trainer is in
cat <<EOF

Done. prime-rl (at ${head:0:12}, $GENERATION) runs from $VENV, on the CPU.
EOF
if [[ $GENERATION == v1 ]]; then
    cat <<EOF
Check a config with prime-rl's own models, or serve an env:

  $VENV/bin/python -m prime_rl.entrypoints.rl @ $AIR_DIR/$CONFIGS/rl_2gpu.toml --dry-run
  $VENV/bin/python -m prime_rl.entrypoints.env_server @ $AIR_DIR/$CONFIGS/env-servers/lane_merge.toml
EOF
else
    cat <<EOF
Rehearse a training run before booking GPUs:

  $VENV/bin/air rehearse --config $AIR_DIR/$CONFIGS/rl_2gpu.toml --steps 3 --prime-rl $DIR
EOF
fi
