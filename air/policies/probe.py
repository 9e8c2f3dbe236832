"""``probe``: a scripted agent that tries a value at random, in the reply format, on tasks scored by one number.

It knows the format and the command, never the answer: each rollout sets a value drawn evenly over the
decades the task allows (ridgePenalty's alpha from 0.01 to 10,000), validates it, and submits after. Its
trajectories are the warm-up data of benchmarks/learning.py (prime-rl's SFT before RL): what it teaches is
how to reply, and leaves to RL which value scores.
"""

from __future__ import annotations

import random
import re
from typing import Any

# The tasks whose score is one number the agent sets, and the command that sets and scores it.
PROBE_COMMANDS = {"ridgePenalty": "echo {value} > submission.csv && validate"}
PROBE_VALUES = ("0.01", "0.03", "0.1", "0.3", "1", "3", "10", "30", "100", "300", "1000", "3000", "10000")
_REASONS = (
    "Let me try a penalty of {value} and score it.",
    "I will set the penalty to {value} and validate.",
    "A penalty of {value} is worth a try; validate will tell.",
)
_TASK_HEADER = re.compile(r"^#\s*Task:\s*(\S+)", re.MULTILINE)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


class ProbePolicy:
    name = "probe"
    plays = frozenset(PROBE_COMMANDS)

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str:
        users = [_text(m) for m in messages if m.get("role") == "user"]
        found = _TASK_HEADER.search(users[0]) if users else None
        task = found.group(1) if found else ""
        if task not in PROBE_COMMANDS:
            return "I cannot play this task.\n```bash\nsubmit\n```"
        if any(m.get("role") == "assistant" for m in messages):
            return "The value is set and scored; submitting.\n```bash\nsubmit\n```"
        value = rng.choice(PROBE_VALUES)
        reason = rng.choice(_REASONS).format(value=value)
        return f"{reason}\n```bash\n{PROBE_COMMANDS[task].format(value=value)}\n```"
