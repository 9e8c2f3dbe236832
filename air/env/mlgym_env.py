"""MLGymEnv: the classic front, MLGym-format tasks as a verifiers 0.1.x ``MultiTurnEnv`` (prime-rl
c87c19b's env_id ``air_mlgym``). The rollout itself is :class:`air.env.core.MLGymCore`'s; this module maps
verifiers' hooks onto it:

    setup_state    core.start: a warm container, the task's workspace, the session
    env_response   core.play: one reply -> one command -> observation (and reward on validate/submit)
    max_turns_reached  core.turns_over: the turn limit is the core's, as on the v1 front
    finish_rollout (a @vf.cleanup hook, so it also runs on max_turns, errors and cancellation)
                   core.finish (the reply max_turns left unplayed, a last evaluation), then core.end:
                   closed, recorded, saved
    rubric         hands the reward and metrics computed there to verifiers (state["metrics"])

Infrastructure faults (``EnvFault``) become ``vf.SandboxError``: that rollout is masked and its group
goes on. A missing image escapes verifiers on purpose, so a run stops at its first rollout.
"""

from __future__ import annotations

import logging
from typing import Any

import verifiers as vf
from datasets import Dataset

from air.env.actions import message_text
from air.env.core import EnvFault, MLGymCore, RolloutLabels
from air.env.host_logging import follow
from air.env.metrics import REWARD_METRIC, metric_names, result_key, task_name_of
from air.env.rollout import Rollout, content_of_completion, jsonable
from air.env.seeds import group_key
from air.env.settings import MLGymEnvSettings

log = logging.getLogger(__name__)
follow("verifiers")  # our warnings where the classic vf-eval puts verifiers' own

STATE_KEY = "air_rollout"
RESULT_KEY = "air_result"


class MLGymEnv(vf.MultiTurnEnv):
    def __init__(self, settings: MLGymEnvSettings, **kwargs: Any) -> None:
        self.settings = settings
        self.core = MLGymCore(settings)
        self.tasks = self.core.tasks  # air replay reads the one task it loaded
        dataset = self._build_dataset()
        super().__init__(
            dataset=dataset,
            eval_dataset=dataset,
            rubric=_build_rubric(list(self.tasks)),
            max_turns=settings.max_turns,
            message_type="chat",
            **kwargs,
        )

    def _build_dataset(self) -> Dataset:
        rows = [
            {
                "prompt": [
                    {"role": "system", "content": example.system_prompt},
                    {"role": "user", "content": example.task_prompt},
                ],
                "task": example.task_name,
                # prime-rl's EnvGroup overwrites `task` with the env's name: route by info.
                "info": {"task_name": example.task_name, "task_id": example.task_id, "example": example.example},
            }
            for example in self.core.examples()
        ]
        dataset = Dataset.from_list(rows)
        if len(rows) > 1:
            dataset = dataset.shuffle(seed=self.settings.seed)
        return dataset.add_column("example_id", list(range(len(rows))))

    async def setup_state(self, state: vf.State) -> vf.State:
        try:
            name = task_name_of(state)
            seed = self.core.group_seed(name, group_key(state.get("info"), state.get("example_id")))
            rollout = self.core.new_rollout(name, seed)
        except EnvFault as exc:
            raise masked(exc) from None
        state[STATE_KEY] = rollout
        try:
            await self.core.start(rollout)
        except EnvFault as exc:
            raise masked(exc) from None
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        rollout: Rollout = state[STATE_KEY]
        text = message_text(messages[-1]) if messages else ""
        try:
            observation, final = await self.core.play(rollout, text)
        except EnvFault as exc:
            raise masked(exc) from None
        reply = [{"role": "user", "content": observation}]
        if final:
            state["final_env_response"] = reply
        return reply

    @vf.stop
    async def max_turns_reached(self, state: vf.State) -> bool:
        """verifiers' turn-limit stop, overridden by name so that the core decides. It stops before the last
        reply reaches env_response: finish plays it, and play says the turns are over."""
        return self.core.turns_over(len(state["trajectory"]))

    @vf.cleanup
    async def finish_rollout(self, state: vf.State) -> None:
        rollout: Rollout | None = state.get(STATE_KEY)
        if rollout is None or rollout.finished:
            return
        if rollout.sandbox is None and self.core.sandboxes_unavailable:
            rollout.finished = True
            return  # never started, and the run is stopping on the missing image: nothing to record
        cancelled = not state.get("is_completed")
        try:
            if not cancelled and state.get("error") is None and rollout.sandbox is not None:
                trajectory = state.get("trajectory") or []
                # max_turns stopped the rollout before env_response saw the last reply: the core plays it.
                unplayed = (
                    content_of_completion(trajectory[-1].get("completion"))
                    if (rollout.handled < len(trajectory))
                    else None
                )
                observation = await self.core.finish(rollout, unplayed)
                if observation is not None:
                    state["final_env_response"] = [{"role": "user", "content": observation}]
        except EnvFault as exc:
            state["error"] = masked(exc)
        except Exception as exc:  # cleanup must never raise into verifiers
            log.exception("unexpected failure finishing a rollout")
            state["error"] = vf.SandboxError(f"finishing the rollout failed unexpectedly: {exc!r}")
        finally:
            stop = state.get("stop_condition") or ""
            ended = await self.core.end(
                rollout, _labels(state), cancelled=cancelled, error=state.get("error"), stop=stop
            )
            state[RESULT_KEY] = ended.result
            state["masked_because"] = ended.record.error  # the one line a run's console shows for a masked rollout
            if ended.path is not None:
                state["trajectory_path"] = str(ended.path)

    @vf.teardown
    async def remove_containers(self) -> None:
        self.core.shutdown()


def masked(fault: EnvFault) -> vf.SandboxError:
    """The error that masks a rollout: verifiers logs its chain of causes on one console line, so the
    chain hangs off ``__context__`` instead, where the trajectory's ``error_chain`` and the log find it."""
    error = vf.SandboxError(str(fault))
    error.__context__ = fault
    error.__suppress_context__ = True
    return error


def _labels(state: vf.State) -> RolloutLabels:
    prompt = state.get("prompt") or []
    info = state.get("info") or {}
    labels = RolloutLabels(
        example_id=state.get("example_id"),
        group_id=info.get("group_id"),
        step=info.get("step"),
        model=state.get("model"),
        policy=info.get("policy"),
        sampling_args=jsonable(state.get("sampling_args") or {}),
        system_prompt=message_text(prompt[0]) if prompt else None,
        task_prompt=message_text(prompt[1]) if len(prompt) > 1 else None,
    )
    if state.get("trajectory_id"):
        labels.id = state["trajectory_id"]
    return labels


def _build_rubric(task_names: list[str]) -> vf.Rubric:
    """The reward and metrics computed in finish_rollout, handed to verifiers by name."""

    def _reader(name: str):
        key = result_key(name)

        async def read(state: vf.State) -> float:
            if name == REWARD_METRIC and state.get("error") is not None:
                return 0.0
            result = state.get(RESULT_KEY) or {}
            return float(result.get(key, 0.0))

        read.__name__ = name
        return read

    rubric = vf.Rubric(funcs=[_reader(REWARD_METRIC)], weights=[1.0])
    for name in metric_names(task_names):
        rubric.add_metric(_reader(name))
    return rubric
