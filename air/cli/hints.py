"""The command lines our commands print for a user to run next, written for the front they run on.

One environment holds one generation of verifiers (ARCHITECTURE.md), and each ships its own vf-eval with
its own flags: the classic one (0.1.x) takes ``--api-base-url``, today's (0.4.0, pydantic settings) takes
``--client.base-url`` and refuses the former. So a hint names the flags of the vf-eval installed beside
the ``air`` that prints it. tests/cli/test_printed_hints.py and tests/v1/test_v1_hints.py run each line
through the parser of the program it names.
"""

from __future__ import annotations

import shlex

from air.env.generations import Front, installed_front

KEY_VAR = "OPENAI_API_KEY"  # the scripted server checks no key, but both vf-evals insist on a set variable


def vf_eval_hint(url: str, model: str, front: Front) -> str:
    """One small evaluation of air_mlgym against the endpoint at ``url``, for that front's vf-eval."""
    if front == "v1":
        flags = [
            "-m",
            model,
            "-n",
            "1",
            "-r",
            "2",
            "--no-push",
            "--client.base-url",
            url,
            "--client.api-key-var",
            KEY_VAR,
        ]
    else:
        flags = ["--api-base-url", url, "--model", model, "--api-key-var", KEY_VAR, "-n", "1", "-r", "2"]
    return f"{KEY_VAR}=scripted vf-eval air_mlgym {shlex.join(flags)}"


def policy_server_hints(url: str, model: str, front: Front | None = None) -> list[str]:
    """What ``air policy-server`` suggests pointing at itself. ``air standalone`` drives the classic front
    only, so on the v1 front the line is vf-eval's alone."""
    front = front or installed_front()
    hints = [vf_eval_hint(url, model, front)]
    if front == "classic":
        hints.append(f"air standalone --base-url {shlex.quote(url)} --model {shlex.quote(model)}")
    return hints


def tiny_model_hints(directory: str) -> list[str]:
    """What ``air tiny-model`` suggests doing with the model it wrote."""
    return [f"air policy-server --vllm {shlex.quote(directory)} --policy noisy"]
