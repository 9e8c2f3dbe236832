"""Why a v1 trace has more than one branch: each branch point of its message graph, by cause.

verifiers v1 stores an episode as a graph of messages, each node holding the tokens it adds. A turn whose
prompt, as the renderer tokenizes it, repeats an earlier turn's tokens exactly extends that branch; one that
does not starts a new branch at the first node that differs (``verifiers.v1.graph._commit_turn``), and every
branch becomes a training sample of its own. So ``samples_per_rollout`` above 1 means some turn's prompt
was not what had been sampled. A branch point is a node with two children (or a second root); the first
child is what the trace held, the later one what the next prompt rendered. Causes:

- ``message_changed``: the later prompt carried a different message there (the harness re-sent the
  conversation with something rewritten);
- ``reasoning_not_rendered``: the sampled reply had reasoning (a ``<think>`` block the renderer parsed out)
  that the chat template does not render back, so the text differs;
- ``retokenized``: the same text, other token ids (BPE drift: a reply cut mid-character, a merge across
  the template's boundary);
- ``template_text``: the chat template renders the same message as other text (a dropped or added
  separator, stripped whitespace);
- ``resampled``: two sampled replies to one prompt (a retried model call);
- ``other``: none of these.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

CAUSES = ("message_changed", "reasoning_not_rendered", "retokenized", "template_text", "resampled", "other")


def branch_causes(nodes: list[dict[str, Any]], decode: Callable[[list[int]], str]) -> Counter[str]:
    """The branch points of one trace's nodes (as in ``traces.jsonl``), counted by cause."""
    children: dict[int | None, list[int]] = {}
    for index, node in enumerate(nodes):
        children.setdefault(node.get("parent"), []).append(index)
    found: Counter[str] = Counter()
    for kids in children.values():
        first = nodes[kids[0]]
        for later in kids[1:]:
            found[_cause(first, nodes[later], decode)] += 1
    return found


def _cause(first: dict[str, Any], later: dict[str, Any], decode: Callable[[list[int]], str]) -> str:
    if first.get("sampled") and later.get("sampled"):
        return "resampled"
    if _message(first) != _message(later):
        return "message_changed"
    sampled_ids = list(first.get("token_ids") or [])
    rendered_ids = list(later.get("token_ids") or [])
    sampled, rendered = decode(sampled_ids), decode(rendered_ids)
    reasoning = (first.get("message") or {}).get("reasoning_content")
    if reasoning and reasoning.strip() and reasoning.strip() not in rendered:
        return "reasoning_not_rendered"
    if sampled == rendered or rendered.startswith(sampled) or sampled.startswith(rendered):
        return "retokenized" if sampled_ids != rendered_ids[: len(sampled_ids)] else "other"
    return "template_text"


def _message(node: dict[str, Any]) -> tuple[Any, ...]:
    message = node.get("message") or {}
    return (message.get("role"), message.get("content") or "", message.get("reasoning_content"))
