#!/usr/bin/env bash
# The test suite, in the two environments a checkout has (one generation of verifiers each; they conflict):
#   .venv     verifiers 0.1.10 (the classic front)   uv run pytest
#   .venv-v1  verifiers 0.4.0  (the v1 front)        tests/v1 and the architecture test
# Arguments go to both pytest runs (-x, -k, a path). A run that selects no test in one environment is fine.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

run() {
    "$@"
    local status=$?
    [[ $status == 5 ]] && status=0  # pytest: no test selected in this environment
    return $status
}

echo "==> classic front (verifiers 0.1.10): uv run pytest $*"
run uv run pytest "$@"
classic=$?
# tests/conftest.py collects only tests/v1 and the architecture test where verifiers is v1-only.
echo "==> v1 front (verifiers 0.4.0, .venv-v1): pytest $*"
UV_PROJECT_ENVIRONMENT=.venv-v1 run uv run --no-group classic --group v1 pytest "$@"
v1=$?
[[ $classic == 0 && $v1 == 0 ]] || { echo "FAILED: classic suite exit $classic, v1 suite exit $v1" >&2; exit 1; }
