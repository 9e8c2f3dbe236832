"""Every command line air prints runs as printed on the v1 front (.venv-v1, verifiers 0.4.0): the policy
server's vf-eval line through vf-eval 0.4.0 itself (its own ``--dry-run``: resolve and validate the config,
write it, exit), its `air ...` lines through our own parser."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rigs.patience import backstop
from tests.printed_hints import (
    REPO,
    air_parse_problem,
    argv_of,
    banner_url_and_model,
    hints_of,
    policy_server_banner,
)

VF_EVAL = Path(sys.executable).parent / "vf-eval"


def vf_eval_dry_run(argv: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    command = [str(VF_EVAL), *argv, "--dry-run", "--output-dir", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=backstop(300), cwd=REPO)


def test_this_environment_is_the_v1_front() -> None:
    from air.cli.hints import installed_front

    assert installed_front() == "v1"


def test_the_policy_server_banner_suggests_vf_eval_0_4_and_it_takes_it(tmp_path: Path) -> None:
    with policy_server_banner() as lines:
        url, model = banner_url_and_model(lines)
    (vf_eval,) = [line for line in hints_of(lines) if " vf-eval " in line]
    done = vf_eval_dry_run(argv_of(vf_eval, "vf-eval"), tmp_path)
    assert done.returncode == 0, f"vf-eval 0.4.0 refused {vf_eval!r}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    (saved,) = tmp_path.glob("*/configs/resolved/eval.json")
    config = json.loads(saved.read_text())
    assert config["model"] == model and config["push"] is False
    assert (config["client"]["base_url"], config["client"]["api_key_var"]) == (url, "OPENAI_API_KEY")
    assert config["env"]["taskset"]["id"] == "air_mlgym"
    # The check can fail: what the banner used to print.
    classic = ["air_mlgym", "--api-base-url", url, "--model", model]
    refused = vf_eval_dry_run(classic, tmp_path / "classic")
    assert refused.returncode != 0 and "api-base-url" in refused.stdout + refused.stderr


def test_the_banner_prints_the_hint_functions_lines() -> None:
    """air standalone drives the classic front only: not offered here."""
    from air.cli.hints import policy_server_hints

    with policy_server_banner() as lines:
        url, model = banner_url_and_model(lines)
    assert hints_of(lines) == policy_server_hints(url, model) == policy_server_hints(url, model, "v1")
    assert not [line for line in hints_of(lines) if "air standalone" in line]


def test_the_air_lines_parse_here_too() -> None:
    from air.cli.hints import tiny_model_hints

    for line in tiny_model_hints("/tmp/a tiny model"):
        assert air_parse_problem(line) is None, air_parse_problem(line)
