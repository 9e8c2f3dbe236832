"""The v1 front: MLGym-format tasks as a verifiers v1 taskset and env (today's prime-rl and its env servers).

verifiers v1 splits what the classic ``MultiTurnEnv`` did in one process:

    MLGymTaskset.load()   orchestrator side: one task per (task, example), JSON-only data, no container
    MLGymV1Env.run()      env-server side, one episode: core.start (a warm container from this process's
                          pool), then each model turn through core.play until it ends the rollout (submit,
                          the format-error limit, the time limit, the core's turn limit), then core.finish
                          (a last evaluation) and core.end (closed, recorded, saved: the classic front's
                          ending), the reward and metrics recorded on the trace

The taskset config's fields are ``load_environment``'s arguments (``MLGymEnvSettings``), so the TOML keys
under ``env.taskset`` are the same as the classic ``[[orchestrator.env]] args``. The seat is ``player``:
by default our in-process harness (``v1_player``: each model turn one call to the interception endpoint,
no program); verifiers' ``null`` harness (a chat program per turn) still works. The env, not the harness,
runs commands. A fault outside the agent's reach (``EnvFault``) raises ``vf.SandboxError`` inside the
interaction: a failed trace with its cause, which prime-rl leaves out of training; never a silent zero.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import verifiers.v1 as vf

from air.env.core import EnvFault, MLGymCore, RolloutLabels
from air.env.host_logging import follow
from air.env.metrics import REWARD_METRIC, metric_names, result_key
from air.env.rollout import EndReason, Rollout
from air.env.seeds import group_key
from air.env.settings import MLGymEnvSettings, parse_env_settings
from air.env.trajectories import error_line
from air.env.v1_player import PLAYER
from air.sandbox.errors import SandboxesUnavailable

# Set by an env node (air.fleet.node) for its env server: each trace says which node ran it, and when it ended.
FLEET_NODE_VARIABLE = "AIR_FLEET_NODE"

follow("verifiers.v1")  # our warnings where vf-eval 0.4.0 and prime-rl's env servers put verifiers' own


class MLGymTasksetConfig(vf.TasksetConfig, MLGymEnvSettings):
    """``env.taskset`` of a v1 config: ``id = "air_mlgym"`` plus ``load_environment``'s arguments."""

    def env_settings(self) -> MLGymEnvSettings:
        fields = set(MLGymEnvSettings.model_fields)
        return parse_env_settings(self.model_dump(include=fields, exclude_unset=True))


class MLGymTaskData(vf.WireTaskData):
    """What travels from the orchestrator to an env server: names and prompts, JSON only. A WireTaskData:
    prime-rl 559b447's orchestrator, when an env server answers an episode with an error (a lost env node),
    builds the failed episode with the dispatched task's own data as a WireTaskData, and any other TaskData
    type fails that validation and stops the orchestrator (dispatcher.py, handle_completed_episode)."""

    task_name: str
    task_id: str
    example: int = 0


class MLGymTask(vf.Task[MLGymTaskData, vf.State, vf.TaskConfig]):
    """Scored by the env (``MLGymV1Env.run`` records the reward), not by task hooks."""


class MLGymTaskset(vf.Taskset[MLGymTask, MLGymTasksetConfig]):
    def __init__(self, config: MLGymTasksetConfig) -> None:
        super().__init__(config)
        self.core = MLGymCore(config.env_settings())  # reads task configs only: no container

    def load(self):
        for idx, example in enumerate(self.core.examples()):
            data = MLGymTaskData(
                idx=idx,
                name=f"{example.task_name}-{example.example}",
                prompt=example.task_prompt,
                system_prompt=example.system_prompt,
                task_name=example.task_name,
                task_id=example.task_id,
                example=example.example,
            )
            yield MLGymTask(data, self.config.task)


class MLGymV1EnvConfig(vf.EnvConfig):
    # Our in-process chat loop: the commands run in our containers, not in the harness, so the seat's
    # runtime runs nothing (verifiers still makes its folder per episode).
    # verifiers resolves the harness id here, at class definition: air_mlgym must name MLGymPlayer without
    # importing this module first (its taskset and env attributes are lazy).
    player: vf.AgentConfig = vf.AgentConfig(harness=PLAYER, runtime=vf.SubprocessConfig())


class MLGymV1Env(vf.Env[MLGymV1EnvConfig]):
    """One per env-server process: its core keeps the process's container pool."""

    def __init__(self, config: MLGymV1EnvConfig) -> None:
        super().__init__(config)
        self.core: MLGymCore = self.taskset.core

    async def stop(self) -> None:
        # Runs once per server process, also after a failed start: remove what this process started.
        await asyncio.to_thread(self.core.shutdown)

    async def run(self, task: MLGymTask, agents: Any) -> None:
        try:
            name = task.data.task_name  # v1 hands the env no group id: the example is the group (env.seeds)
            seed = self.core.group_seed(name, group_key(None, task.data.idx))
            rollout = self.core.new_rollout(name, seed)
        except EnvFault as exc:
            raise vf.SandboxError(str(exc)) from exc
        error: BaseException | None = None
        cancelled, trace = False, None
        try:
            async with agents.player.interaction(task) as interaction:
                trace = interaction.trace
                try:
                    error = await self._episode(rollout, interaction)
                except (EnvFault, SandboxesUnavailable) as exc:  # a missing image's or engine's message names the fix
                    raise vf.SandboxError(str(exc)) from exc
        except asyncio.CancelledError:
            cancelled = True
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            labels = RolloutLabels(
                example_id=task.data.idx,
                model=_model_of(trace),
                system_prompt=task.data.system_prompt,
                task_prompt=task.data.prompt if isinstance(task.data.prompt, str) else None,
            )
            ended = await self.core.end(rollout, labels, cancelled=cancelled, error=_describe(error), chain_of=error)
            if trace is not None and error is None and not cancelled:
                trace.record_reward(REWARD_METRIC, ended.result[result_key(REWARD_METRIC)], 1.0)
                for name in metric_names(list(self.core.tasks)):
                    trace.record_metric(name, float(ended.result[result_key(name)]))
                trace.info["exit_status"] = ended.reason.value
            if trace is not None and ended.path is not None and not cancelled:
                trace.info["trajectory_path"] = str(ended.path)
            if trace is not None and (node := os.environ.get(FLEET_NODE_VARIABLE)):
                trace.info["env_node"], trace.info["ended_at"] = node, time.time()  # which node, when (air/fleet)

    async def _episode(self, rollout: Rollout, interaction: Any) -> ModelCallFailed | None:
        """Turns until play ends the rollout (submit, a limit: the turn limit is the core's); the reply of the
        last turn is played too (the classic front's max_turns behaviour), then a last evaluation if the
        workspace changed.
        A failed model call ends it at once, as the classic front does: no evaluation, no reward, the
        endpoint's words as the error (returned, for the record; verifiers already failed the trace)."""
        await self.core.start(rollout)
        segment = await interaction.turn()
        while not segment.terminated:
            observation, final = await self.core.play(rollout, segment.last_reply or "")
            if final:
                break
            segment = await interaction.turn(observation)
        else:
            failed = interaction.trace.last_error
            if failed is not None:
                return ModelCallFailed(f"{failed.type}: {failed.message}")
            # A limit ended the rollout (tokens, a stop hook): verifiers records which.
            rollout.exit_status = rollout.exit_status or EndReason.HARNESS_STOPPED
        await self.core.finish(rollout)
        return None


class ModelCallFailed(Exception):
    """The seat's model call failed (verifiers' error on the trace, carried into our trajectory)."""


def _describe(error: BaseException | None) -> str | None:
    if isinstance(error, ModelCallFailed):
        return str(error)  # already "<verifiers' error type>: <the endpoint's words>"
    if error is None or not str(error).strip():
        return error_line(error)  # an empty message: the cause down the chain names it
    return f"{type(error).__name__}: {error_line(error)}"


__all__ = ["MLGymTaskset", "MLGymV1Env"]


def _model_of(trace: Any) -> str | None:
    """The model the rollout's calls asked for, as verifiers recorded them (the env is never told it otherwise)."""
    calls = getattr(trace, "calls", None) or []
    return next((call.model for call in reversed(calls) if getattr(call, "model", None)), None)
