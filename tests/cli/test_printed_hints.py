"""Every command line air prints runs as printed on the classic front (.venv, verifiers 0.1.x): `air ...`
through our own parser, vf-eval's through the classic vf-eval's own argparse (stopped right after it
parsed). tests/v1/test_v1_hints.py does the same on the v1 front."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rigs.patience import backstop
from tests.printed_hints import (
    air_parse_problem,
    air_spans,
    argv_of,
    banner_url_and_model,
    hints_of,
    policy_server_banner,
)

URL = "http://127.0.0.1:8008/v1"

# The installed vf-eval's entry point, run with argparse's parse_args made to print what it parsed and exit.
PARSE_ONLY = """
import argparse, json, sys
from importlib.metadata import entry_points

real = argparse.ArgumentParser.parse_args

def parse_and_stop(self, args=None, namespace=None):
    parsed = real(self, args, namespace)
    print(json.dumps(vars(parsed), default=str))
    raise SystemExit(0)

argparse.ArgumentParser.parse_args = parse_and_stop
(main,) = entry_points(group="console_scripts", name="vf-eval")
sys.argv = ["vf-eval", *json.loads(sys.argv[1])]
main.load()()
"""


def classic_vf_eval_parse(argv: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PARSE_ONLY, json.dumps(argv)], capture_output=True, text=True, timeout=backstop(120)
    )
    assert done.returncode == 0, f"vf-eval refused {argv}:\n{done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_this_environment_is_the_classic_front() -> None:
    from air.cli.hints import installed_front

    assert installed_front() == "classic"


def test_each_air_command_line_in_our_strings_parses() -> None:
    spans = air_spans()
    problems = [f"{where}: {line!r}: {air_parse_problem(line)}" for where, line in spans if air_parse_problem(line)]
    assert not problems, "\n".join(problems)
    # The scan sees what it should (the fixes `air check` and `air clean` print), and the check can fail.
    assert {"air clean --include-running", "air clean --yes", "uv run air build-image"} <= {s for _, s in spans}
    assert air_parse_problem("air clean --no-such-flag") is not None


def test_the_hint_functions_air_lines_parse() -> None:
    from air.cli.hints import policy_server_hints, tiny_model_hints

    lines = [*policy_server_hints(URL, "scripted-noisy", "classic"), *tiny_model_hints("/tmp/a tiny model")]
    lines += policy_server_hints(URL, "scripted-noisy", "v1")
    air_lines = [line for line in lines if " vf-eval " not in line]
    assert air_lines and all(air_parse_problem(line) is None for line in air_lines), air_lines


def test_the_policy_server_banner_suggests_the_classic_vf_eval_and_it_parses() -> None:
    with pytest.raises(AssertionError, match="refused"):  # the check can fail: vf-eval 0.4.0's flags
        classic_vf_eval_parse(["air_mlgym", "--client.base-url", URL])
    with policy_server_banner() as lines:
        url, model = banner_url_and_model(lines)
    hints = hints_of(lines)
    (vf_eval,) = [line for line in hints if " vf-eval " in line]
    parsed = classic_vf_eval_parse(argv_of(vf_eval, "vf-eval"))
    assert (parsed["env_id_or_config"], parsed["api_base_url"], parsed["model"]) == ("air_mlgym", url, model)
    # Without it the classic vf-eval reads PRIME_API_KEY, not the variable the line sets.
    assert parsed["api_key_var"] == "OPENAI_API_KEY" and vf_eval.startswith("OPENAI_API_KEY=")
    (standalone,) = [line for line in hints if line.startswith("air standalone")]
    assert air_parse_problem(standalone) is None

    from air.cli.hints import policy_server_hints

    assert hints == policy_server_hints(url, model) == policy_server_hints(url, model, "classic")
