"""MLGymEnv: MLGym-format tasks as a verifiers ``MultiTurnEnv`` (prime-rl's env_id ``air_mlgym``).

One rollout is one agent in one fresh container:

    setup_state    take a warm container, lay out the task's workspace, start the session
    env_response   reply -> one command (actions) -> run it -> on a validate/submit marker,
                   evaluate the workspace (air.tasks) -> step reward (rewards) -> observation
    finish_rollout (a @vf.cleanup hook, so it also runs on max_turns, errors and cancellation)
                   run the last reply's command if verifiers stopped before it (max_turns), evaluate
                   a workspace changed since its last evaluation, compute the reward, write the
                   trajectory, destroy the container
    rubric         hands the reward and metrics computed there to verifiers (state["metrics"])

Infrastructure faults (a dead container, a Docker error, anything unexpected in the env) become
``vf.SandboxError``: that rollout is masked and its group goes on. Agent mistakes (a malformed
reply, a failing or timed-out command, a broken submission) are observations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import verifiers as vf
from datasets import Dataset

from air.env import prompts
from air.env.actions import format_error_observation, message_text, parse_action
from air.env.metrics import metric_names, task_name_of
from air.env.rewards import RewardTracker
from air.env.rollout import Rollout, content_of_completion, exit_status_of, jsonable
from air.env.settings import MLGymEnvSettings
from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn, TurnEvaluation, write_trajectory
from air.sandbox.config import SandboxConfig
from air.sandbox.errors import SandboxError, SandboxImageMissing
from air.sandbox.pool import SandboxPool, cleanup_all, destroy_in_background
from air.tasks.config import TaskError
from air.tasks.loader import BUILTIN_TASK_ROOT, Task, list_tasks, load_task, resolve_task_root
from air.tasks.mlgym_tools import ToolSet, guard_multiline, load_mlgym_tools
from air.tasks.workspace import Evaluation, TaskWorkspace

log = logging.getLogger(__name__)

# MLGym's marker format: its validate/submit shell functions print these, and so do ours.
MARKER = re.compile(r"<<(VALIDATION|SUBMISSION)\|\|.*?\|\|\1>>\n?", re.DOTALL)
LONG_COMMAND = re.compile(r"\b(python[0-9.]*|torchrun|accelerate|deepspeed)\b")

# The built-in tasks' validate and submit: they only print a marker, like MLGym's; the env does the rest.
BUILTIN_SESSION = """\
validate() { echo '<<VALIDATION||validate||VALIDATION>>'; }
submit() { echo '<<SUBMISSION||submit||SUBMISSION>>'; }
export -f validate submit"""

STATE_KEY = "air_rollout"
RESULT_KEY = "air_result"


class MLGymEnv(vf.MultiTurnEnv):
    def __init__(self, settings: MLGymEnvSettings, **kwargs: Any) -> None:
        self.settings = settings
        self.task_root = resolve_task_root(settings.task_root)
        names = settings.task_configs
        if names is None:
            if self.task_root != BUILTIN_TASK_ROOT.resolve():
                raise TaskError(f"task_configs is required with task root {self.task_root}")
            names = list_tasks(self.task_root)
        self.tasks: dict[str, Task] = {}
        for name in names:
            task = load_task(name, self.task_root)
            self.tasks[task.name] = task
        self.tools: ToolSet | None = load_mlgym_tools(self.task_root)
        self.multiline = self.tools.multiline_commands() if self.tools else {}
        self._tools_archive = self.tools.install_archive() if self.tools else b""
        self.sandbox_config = SandboxConfig(
            image=settings.image or "",
            network=settings.network,
            env_gpu=settings.env_gpu,
            command_timeout_s=settings.command_timeout,
            cpus=settings.container_cpus,
            memory=settings.container_memory,
            run_id=settings.run_id,
        )
        self.trajectory_dir = settings.trajectory_path() if settings.save_trajectories else None
        dataset = self._build_dataset()
        super().__init__(
            dataset=dataset,
            eval_dataset=dataset,
            rubric=_build_rubric(list(self.tasks)),
            max_turns=settings.max_turns,
            message_type="chat",
            **kwargs,
        )
        self._pool: SandboxPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._pool_pid: int | None = None

    # --- dataset (built at load: cheap, no container) -----------------------------------------

    def _build_dataset(self) -> Dataset:
        s = self.settings
        system = prompts.system_prompt(
            tools=self.tools,
            max_turns=s.max_turns,
            command_timeout=s.command_timeout,
            long_command_timeout=s.long_command_timeout,
            observation_max_chars=s.observation_max_chars,
        )
        rows = []
        for task in self.tasks.values():
            user = prompts.task_prompt(task, listing=prompts.workspace_listing(task))
            for example in range(s.num_examples_per_task):
                rows.append(
                    {
                        "prompt": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                        "task": task.name,
                        # prime-rl's EnvGroup overwrites `task` with the env's name: route by info.
                        "info": {"task_name": task.name, "task_id": task.id, "example": example},
                    }
                )
        dataset = Dataset.from_list(rows).shuffle(seed=s.seed) if len(rows) > 1 else Dataset.from_list(rows)
        return dataset.add_column("example_id", list(range(len(rows))))

    # --- containers ---------------------------------------------------------------------------

    def _pool_here(self) -> SandboxPool:
        """One pool per process and event loop: prime-rl forks env workers; tests run many loops."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop or self._pool_pid != os.getpid():
            if self._pool is not None and self._pool_pid == os.getpid():
                self._pool.abandon()  # its loop is gone; a forked child leaves the parent's pool alone
            self._pool = SandboxPool(self.sandbox_config, size=self.settings.pool_size)
            self._pool_loop, self._pool_pid = loop, os.getpid()
        return self._pool

    async def setup_state(self, state: vf.State) -> vf.State:
        name = task_name_of(state)
        task = self.tasks.get(name)
        if task is None:
            raise vf.SandboxError(f"unknown task {name!r}; this env serves {sorted(self.tasks)}")
        tracker = RewardTracker(task.baseline_score, task.higher_is_better, self.settings.reward)
        rollout = Rollout(task=task, sandbox=None, workspace=None, tracker=tracker)
        state[STATE_KEY] = rollout
        try:
            rollout.sandbox = await self._pool_here().acquire()
            rollout.workspace = TaskWorkspace(task, rollout.sandbox)
            await rollout.workspace.setup()
            if self.tools is not None:
                await rollout.sandbox.put_archive(
                    "/home/agent", self._tools_archive, owner=self.sandbox_config.user, top=["commands"]
                )
                await rollout.sandbox.shell.initialize(self.tools.init_script())
            else:
                await rollout.sandbox.shell.initialize(BUILTIN_SESSION)
        except SandboxImageMissing:
            # Not a vf.Error on purpose: verifiers lets it through, so vf-eval, `air standalone` and
            # prime-rl stop at the first rollout with the fix named, instead of masking every one.
            raise
        except (SandboxError, TaskError, OSError) as exc:
            raise vf.SandboxError(f"setting up task {task.name} failed: {exc}") from exc
        except Exception as exc:  # nothing may fail the whole group
            log.exception("unexpected failure setting up a rollout")
            raise vf.SandboxError(f"setting up task {task.name} failed unexpectedly: {exc!r}") from exc
        return state

    # --- turns --------------------------------------------------------------------------------

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        rollout: Rollout = state[STATE_KEY]
        text = message_text(messages[-1]) if messages else ""
        try:
            observation, final = await self._play(rollout, text)
        except SandboxError as exc:
            raise vf.SandboxError(str(exc)) from exc
        except vf.Error:
            raise
        except Exception as exc:
            log.exception("unexpected failure in env_response")
            raise vf.SandboxError(f"env failed unexpectedly: {exc!r}") from exc
        reply = [{"role": "user", "content": observation}]
        if final:
            state["final_env_response"] = reply
        return reply

    async def _play(self, rollout: Rollout, text: str, *, after_last_turn: bool = False) -> tuple[str, bool]:
        """Act on one model reply; returns (observation, whether the rollout ends here)."""
        s = self.settings
        rollout.handled += 1
        number = rollout.handled
        parsed = parse_action(text, self.multiline)
        if parsed.command is None:
            rollout.format_errors += 1
            rollout.consecutive_format_errors += 1
            observation = format_error_observation(parsed.error or "no command found")
            rollout.turns.append(
                Turn(index=number, model_text=text, command=None, format_error=parsed.error, output=observation)
            )
            limit = s.max_consecutive_format_errors
            if limit and rollout.consecutive_format_errors >= limit:
                rollout.exit_status = "format_errors"
                return observation + f"\n[{limit} malformed replies in a row: the episode ends]", True
            return observation, False

        rollout.consecutive_format_errors = 0
        assert rollout.sandbox is not None and rollout.workspace is not None
        command = guard_multiline(parsed.command, self.multiline) if self.multiline else parsed.command
        result = await rollout.sandbox.run(command, timeout=self._timeout_for(command, rollout.task))
        rollout.dirty = True
        rollout.timeouts += int(result.timed_out)
        markers = {m.group(1) for m in MARKER.finditer(result.output)}
        output = MARKER.sub("", result.output)
        turn = Turn(
            index=number,
            model_text=text,
            command=parsed.command,
            exit_code=result.exit_code,
            duration_s=result.duration_s,
            timed_out=result.timed_out,
            executed_after_last_turn=after_last_turn,
        )
        parts = [prompts.cap_output(output.rstrip("\n"), s.observation_max_chars)] if output.strip() else []
        submitted = "SUBMISSION" in markers
        if markers:
            kind = "submit" if submitted else "validate"
            evaluation, turn.evaluation, turn.step_reward = await self._evaluate(rollout, kind)
            rollout.validates += int(kind == "validate")
            parts.append(prompts.evaluation_text(rollout.task, evaluation, submitted=submitted))
        parts.append(
            prompts.footer(number, s.max_turns, result.exit_code, rollout.sandbox.shell.cwd, timed_out=result.timed_out)
        )
        turn.output = "\n".join(parts)
        rollout.turns.append(turn)
        if submitted:
            rollout.submitted = True
            rollout.exit_status = "submitted"
        return turn.output, submitted

    def _timeout_for(self, command: str, task: Task) -> float:
        if LONG_COMMAND.search(command):
            return float(self.settings.long_command_timeout or task.training_timeout)
        return self.settings.command_timeout

    async def _evaluate(self, rollout: Rollout, kind: str) -> tuple[Evaluation, TurnEvaluation, float]:
        assert rollout.workspace is not None
        evaluation = await rollout.workspace.evaluate()
        suspicious = evaluation.status == "suspicious"
        step_reward = rollout.tracker.record(evaluation.score if evaluation.ok else None, suspicious=suspicious)
        rollout.dirty = False
        record = TurnEvaluation(
            status=evaluation.status,
            score=evaluation.score,
            metrics=evaluation.metrics,
            error=evaluation.error,
            duration_s=evaluation.duration_s,
            kind=kind,
        )
        return evaluation, record, step_reward

    # --- end of a rollout ---------------------------------------------------------------------

    @vf.cleanup
    async def finish_rollout(self, state: vf.State) -> None:
        rollout: Rollout | None = state.get(STATE_KEY)
        if rollout is None or rollout.finished:
            return
        rollout.finished = True
        if rollout.sandbox is None and self._pool is not None and self._pool.missing_image is not None:
            return  # never started, and the run is stopping on the missing image: nothing to record
        cancelled = not state.get("is_completed")
        try:
            if not cancelled and state.get("error") is None and rollout.sandbox is not None:
                await self._finish_work(rollout, state)
        except SandboxError as exc:
            state["error"] = vf.SandboxError(f"finishing the rollout failed: {exc}")
        except Exception as exc:  # cleanup must never raise into verifiers
            log.exception("unexpected failure finishing a rollout")
            state["error"] = vf.SandboxError(f"finishing the rollout failed unexpectedly: {exc!r}")
        finally:
            rollout.exit_status = exit_status_of(rollout, state, cancelled)
            if rollout.tracker.suspicious_evaluations and rollout.exit_status != "error":
                rollout.exit_status = "suspicious_evaluation"  # stands out in the viewer and W&B
            state[RESULT_KEY] = self._result(rollout)
            if rollout.sandbox is not None:
                destroy_in_background(rollout.sandbox)
            if self.trajectory_dir is not None:
                await self._save(rollout, state)

    async def _finish_work(self, rollout: Rollout, state: vf.State) -> None:
        trajectory = state.get("trajectory") or []
        if rollout.handled < len(trajectory) and not rollout.submitted and rollout.exit_status is None:
            # max_turns stopped the rollout before env_response saw the last reply: run it now.
            text = content_of_completion(trajectory[-1].get("completion"))
            observation, _ = await self._play(rollout, text, after_last_turn=True)
            state["final_env_response"] = [{"role": "user", "content": observation}]
        if not rollout.submitted and (rollout.dirty or rollout.tracker.evaluations == 0):
            _, rollout.final_evaluation, _ = await self._evaluate(rollout, "final")
        elif rollout.turns and rollout.turns[-1].evaluation is not None:
            rollout.final_evaluation = rollout.turns[-1].evaluation

    def _result(self, rollout: Rollout) -> dict[str, float]:
        metrics = rollout.tracker.metrics()
        metrics.update(
            validates=float(rollout.validates),
            format_errors=float(rollout.format_errors),
            timeouts=float(rollout.timeouts),
            turns=float(rollout.handled),
            submitted=float(rollout.submitted),
        )
        metrics["reward"] = rollout.tracker.rollout_reward(rollout.format_errors)
        return metrics

    async def _save(self, rollout: Rollout, state: vf.State) -> None:
        assert self.trajectory_dir is not None
        task = rollout.task
        result = state[RESULT_KEY]
        prompt = state.get("prompt") or []
        info = state.get("info") or {}
        error = state.get("error")
        finished = datetime.now(UTC)
        record = TrajectoryRecord(
            id=state.get("trajectory_id") or secrets.token_hex(16),
            task=task.name,
            task_id=task.id,
            example_id=state.get("example_id"),
            group_id=info.get("group_id"),
            step=info.get("step"),
            model=state.get("model"),
            policy=info.get("policy"),
            sampling_args=jsonable(state.get("sampling_args") or {}),
            image=self.sandbox_config.resolved_image(),
            task_root=str(self.task_root),
            env_settings=self.settings.model_dump(mode="json"),
            system_prompt=message_text(prompt[0]) if prompt else None,
            task_prompt=message_text(prompt[1]) if len(prompt) > 1 else None,
            started_at=rollout.started_at,
            finished_at=finished,
            duration_s=(finished - rollout.started_at).total_seconds(),
            exit_status=rollout.exit_status or "unknown",
            error=str(error) if error else None,
            baseline=BaselineInfo(
                metric=task.primary_metric,
                score=task.baseline_score,
                higher_is_better=task.higher_is_better,
                metrics=task.baseline,
            ),
            final_evaluation=rollout.final_evaluation,
            reward=None if error else result["reward"],
            metrics={k: v for k, v in result.items() if k != "reward"},
            turns=rollout.turns,
        )
        try:
            path = await asyncio.to_thread(write_trajectory, record, self.trajectory_dir)
            state["trajectory_path"] = str(path)
        except Exception as exc:  # a full disk must not cost the rollout
            log.warning("could not save the trajectory of a %s rollout: %s", task.name, exc)

    @vf.teardown
    async def remove_containers(self) -> None:
        # Synchronous on purpose: it also runs from atexit, when no thread can be started.
        if self._pool is not None:
            cleanup_all()


def _build_rubric(task_names: list[str]) -> vf.Rubric:
    """The reward and metrics computed in finish_rollout, handed to verifiers by name."""

    def _reader(name: str):
        key = "reward" if name == "mlgym_reward" else name.rpartition("/")[2]

        async def read(state: vf.State) -> float:
            if name == "mlgym_reward" and state.get("error") is not None:
                return 0.0
            result = state.get(RESULT_KEY) or {}
            return float(result.get(key, 0.0))

        read.__name__ = name
        return read

    rubric = vf.Rubric(funcs=[_reader("mlgym_reward")], weights=[1.0])
    for name in metric_names(task_names):
        rubric.add_metric(_reader(name))
    return rubric
