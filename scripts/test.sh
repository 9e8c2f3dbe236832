#!/usr/bin/env bash
# The test suite, in the two environments a checkout has (one generation of verifiers each; they conflict):
#   .venv     verifiers 0.1.10 (the classic front)   uv run --group dev --extra tiny pytest
#   .venv-v1  verifiers 0.4.0  (the v1 front)        tests/v1 and the architecture test
# The dev group (pytest, playwright, ...) and the tiny extra (torch, transformers) are not in set-up's lean
# .venv: the first run adds them (torch from PyPI is CUDA's on Linux: about 4 GB, once; uv caches it).
#
#   bash scripts/test.sh          the fast tier: every test but the slow and red-team ones (a few minutes)
#   bash scripts/test.sh --all    every test (CI runs this)
#
# Options go to both pytest runs (-x, -k ...), a path to the run it belongs to (a path named runs all its
# tests, whatever their tier). A run that selects no test in one environment is fine. Tests run in three
# xdist workers (most of a test's time is waiting on Docker and subprocesses); -n 0 runs them in one process.
# Ctrl-C stops the whole: the run under way ends, none after it starts, and the exit status is 130.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# What uv installs for a run (.venv-v1 on its first sync) is compiled once, not by every test's process.
export UV_COMPILE_BYTECODE=${UV_COMPILE_BYTECODE:-1}

workers=(-n 3 --dist loadgroup)
for arg in "$@"; do
    case $arg in -n | -n* | --numprocesses* | --pdb | -s | --capture=no) workers=() ;; esac
done
set -- "${workers[@]}" "$@"

# Ctrl-C reaches pytest too, which ends its run and exits 2 like any other failure: without this trap bash
# would go on to the next run. The trap runs once the foreground run has ended; then nothing else starts.
interrupted=""
trap 'interrupted=130' INT
trap 'interrupted=143' TERM
stop_if_interrupted() {
    [[ -z $interrupted ]] && return 0
    echo "==> interrupted: $1; no further run started" >&2
    exit "$interrupted"
}

run() {
    "$@"
    local status=$?
    [[ $status == 5 ]] && status=0  # pytest: no test selected in this environment
    return $status
}

echo "==> classic front (verifiers 0.1.10): uv run --group dev --extra tiny pytest $*"
run uv run --group dev --extra tiny pytest "$@"
classic=$?
stop_if_interrupted "the classic run ended with exit $classic"
# tests/conftest.py collects only tests/v1 and the architecture test where verifiers is v1-only. Paths
# named on the command line are collected whatever conftest says, so the v1 run keeps only its own (and
# is skipped when every path named belongs to the classic suite).
v1_args=() named=0 kept=0
for arg in "$@"; do
    if [[ $arg != -* && -e ${arg%%::*} ]]; then
        named=1
        [[ $arg == tests/v1* || $arg == tests/test_architecture.py* ]] || continue
        kept=1
    fi
    v1_args+=("$arg")
done
v1=0
if [[ $named == 1 && $kept == 0 ]]; then
    echo "==> v1 front: no test of it named"
else
    echo "==> v1 front (verifiers 0.4.0, .venv-v1): pytest ${v1_args[*]}"
    UV_PROJECT_ENVIRONMENT=.venv-v1 run uv run --no-group classic --group dev --group v1 --extra tiny pytest "${v1_args[@]}"
    v1=$?
    stop_if_interrupted "the v1 run ended with exit $v1"
fi
[[ $classic == 0 && $v1 == 0 ]] || { echo "FAILED: classic suite exit $classic, v1 suite exit $v1" >&2; exit 1; }
