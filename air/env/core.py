"""The env's core, free of verifiers: everything one rollout does, whichever verifiers front drives it.

Two fronts glue it to a verifiers generation: ``mlgym_env`` (the classic ``vf.MultiTurnEnv`` of
verifiers 0.1.x, prime-rl c87c19b) and ``v1_front`` (a ``vf.Taskset`` and ``vf.Env`` of verifiers v1,
today's prime-rl and its env servers). Both call the same four steps:

    start(rollout)    take a warm container, lay out the task's workspace, start the session
    play(reply)       reply -> one command (actions) -> run it -> on a validate/submit marker, evaluate
                      the workspace (air.tasks) -> step reward (rewards) -> the observation
    finish(unplayed)  run a last reply the front never handed over (max turns), evaluate a workspace
                      changed since its last evaluation
    end(...)          how it ended (``EndReason``), reward and metrics, the container destroyed, the
                      trajectory recorded and saved (``ending``: the same for both fronts)

The turn limit is the core's too (``turns_over``): play ends the rollout on its last turn, and the classic
front's verifiers stop condition asks the same question.

Faults outside the agent's reach (a dead container, a Docker error, anything unexpected) become
:class:`EnvFault`; each front turns it into its own masked or failed rollout. Agent mistakes (a
malformed reply, a failing or timed-out command, a broken submission) are observations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from air.env import prompts
from air.env.actions import format_error_observation, parse_action
from air.env.command_programs import command_timeout
from air.env.ending import Ended, RolloutEnding, RolloutLabels
from air.env.rewards import RewardTracker
from air.env.rollout import EndReason, Rollout
from air.env.seeds import load_secret, rollout_seed, secret_fingerprint
from air.env.settings import MLGymEnvSettings
from air.env.trajectories import Turn, TurnEvaluation
from air.sandbox.engine import DOCKER_ERRORS
from air.sandbox.errors import SandboxError, SandboxesUnavailable, ShellUnstartable
from air.sandbox.pool import SandboxPool
from air.sandbox.removal import cleanup_all
from air.tasks.config import TaskError
from air.tasks.loader import BUILTIN_TASK_ROOT, Task, list_tasks, load_task, resolve_task_root
from air.tasks.mlgym_tools import ToolSet, guard_multiline, load_mlgym_tools
from air.tasks.workspace import Evaluation, TaskWorkspace

__all__ = ["EndReason", "Ended", "EnvFault", "Example", "MLGymCore", "RolloutLabels"]

log = logging.getLogger(__name__)

# MLGym's marker format: its validate/submit shell functions print these, and so do ours.
MARKER = re.compile(r"<<(VALIDATION|SUBMISSION)\|\|.*?\|\|\1>>\n?", re.DOTALL)
# The built-in tasks' validate and submit: they only print a marker, like MLGym's; the env does the rest.
BUILTIN_SESSION = """\
validate() { echo '<<VALIDATION||validate||VALIDATION>>'; }
submit() { echo '<<SUBMISSION||submit||SUBMISSION>>'; }
export -f validate submit"""


class EnvFault(RuntimeError):
    """A rollout failed for a reason outside the agent's reach; the front masks or fails that rollout."""


@dataclass(frozen=True)
class Example:
    """One prompt of the env's dataset: which task, which copy, the two opening messages."""

    task_name: str
    task_id: str
    example: int
    system_prompt: str
    task_prompt: str


class MLGymCore(RolloutEnding):
    """Tasks, tools and containers of one env (one per process: a pool belongs to one event loop)."""

    def __init__(self, settings: MLGymEnvSettings) -> None:
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
        self.sandbox_config = settings.sandbox_config()
        # The host's secret in every evaluation seed (env.seeds); not needed where one seed is fixed (a replay).
        self._secret = b""
        if settings.evaluation_seed is None:
            self._secret, where = load_secret(settings.evaluation_secret_file)
            log.info(
                "evaluation seeds from seed %d and the secret %s (%s)",
                settings.seed,
                where,
                secret_fingerprint(self._secret),
            )
        self.trajectory_dir: Path | None = settings.trajectory_path() if settings.save_trajectories else None
        self.cancel_cause: str | None = None  # why the run is stopping, set by its driver: the record's error
        self._pool: SandboxPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._pool_pid: int | None = None

    # --- prompts (built at load: cheap, no container) -----------------------------------------

    def examples(self) -> list[Example]:
        s = self.settings
        system = prompts.system_prompt(
            tools=self.tools,
            max_turns=s.max_turns,
            command_timeout=s.command_timeout,
            long_command_timeout=s.long_command_timeout,
            observation_max_chars=s.observation_max_chars,
            brief=s.prompt_style == "brief",
        )
        found = []
        for task in self.tasks.values():
            user = prompts.task_prompt(task, listing=prompts.workspace_listing(task))
            found += [Example(task.name, task.id, n, system, user) for n in range(s.num_examples_per_task)]
        return found

    def task(self, name: str) -> Task:
        task = self.tasks.get(name)
        if task is None:
            raise EnvFault(f"unknown task {name!r}; this env serves {sorted(self.tasks)}")
        return task

    # --- containers ---------------------------------------------------------------------------

    def pool(self) -> SandboxPool:
        """One pool per process and event loop: prime-rl forks env workers; tests run many loops."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop or self._pool_pid != os.getpid():
            if self._pool is not None and self._pool_pid == os.getpid():
                self._pool.abandon()  # its loop is gone; a forked child leaves the parent's pool alone
            self._pool = SandboxPool(self.sandbox_config, size=self.settings.pool_size)
            self._pool_loop, self._pool_pid = loop, os.getpid()
        return self._pool

    @property
    def sandboxes_unavailable(self) -> bool:  # no sandbox can start (the image is missing): the run stops
        return self._pool is not None and self._pool.unavailable is not None

    async def _fault(self, rollout: Rollout, exc: BaseException, doing: str | None) -> tuple[EnvFault, BaseException]:
        """The EnvFault for a failed Docker call: naming the engine when it went away under the rollout
        (the pool asks it), else the call's own error. Either way one line; the chain stays attached."""
        pool = self._pool if self._pool_loop is asyncio.get_running_loop() else None
        cause = await pool.engine_fault(rollout.sandbox, exc) if pool is not None else None
        own = f"{doing} failed: {exc}" if doing else str(exc)
        fault = EnvFault(str(cause) if cause is not None else own)
        log.info("rollout of %s masked: %s", rollout.task.name, fault, exc_info=exc)  # the chain, for the log file
        return fault, cause if cause is not None else exc

    def group_seed(self, task_name: str, key: str) -> int:
        """The evaluation seed of the group ``key`` (env.seeds.group_key) of ``task_name``."""
        return rollout_seed(self.settings, self._secret, task_name, key)

    def new_rollout(self, task_name: str, seed: int | None = None) -> Rollout:  # seed: env.seeds, its group's
        task = self.task(task_name)
        tracker = RewardTracker(task.baseline_score, task.higher_is_better, self.settings.reward)
        return Rollout(task=task, sandbox=None, workspace=None, tracker=tracker, evaluation_seed=seed)

    async def start(self, rollout: Rollout) -> None:
        """Give the rollout a fresh container with its task laid out. ``SandboxesUnavailable`` (the image is
        missing, the engine did not come back) escapes on purpose: every rollout would fail the same way, so
        the run stops at the first one with the fix named. A container taken before a failure goes with
        :meth:`close`."""
        task = rollout.task
        try:
            rollout.sandbox = await self.pool().acquire()
            rollout.workspace = TaskWorkspace(
                task, rollout.sandbox, seed=rollout.evaluation_seed, evaluation_timeout=self.settings.evaluation_timeout
            )
            await rollout.workspace.setup()
            if self.tools is not None:
                await rollout.sandbox.put_archive(
                    "/home/agent", self._tools_archive, owner=self.sandbox_config.user, top=["commands"]
                )
                await rollout.sandbox.shell.initialize(self.tools.init_script())
            else:
                await rollout.sandbox.shell.initialize(BUILTIN_SESSION)
        except SandboxesUnavailable:
            raise
        except (SandboxError, TaskError, OSError, *DOCKER_ERRORS) as exc:
            fault, cause = await self._fault(rollout, exc, f"setting up task {task.name}")
            raise fault from cause
        except Exception as exc:  # nothing may fail the whole group
            log.exception("unexpected failure setting up a rollout")
            raise EnvFault(f"setting up task {task.name} failed unexpectedly: {exc!r}") from exc

    # --- turns --------------------------------------------------------------------------------

    async def play(self, rollout: Rollout, text: str, *, after_last_turn: bool = False) -> tuple[str, bool]:
        """Act on one model reply; returns (observation, whether the rollout ends here)."""
        try:
            return await self._play(rollout, text, after_last_turn)
        except ShellUnstartable as exc:  # the agent's doing, not the host's: penalised, never masked
            return self._forfeit(rollout, text, exc), True
        except (SandboxError, *DOCKER_ERRORS) as exc:
            fault, cause = await self._fault(rollout, exc, None)
            raise fault from cause
        except Exception as exc:
            log.exception("unexpected failure acting on a reply")
            raise EnvFault(f"env failed unexpectedly: {exc!r}") from exc

    def turns_over(self, replies: int) -> bool:
        """The turn limit, the same for both fronts: the model has had its turns after ``replies`` replies."""
        return replies >= self.settings.max_turns

    async def _play(self, rollout: Rollout, text: str, after_last_turn: bool) -> tuple[str, bool]:
        observation, ends = await self._act(rollout, text, after_last_turn)
        if not ends and self.turns_over(rollout.handled):
            rollout.exit_status, ends = EndReason.MAX_TURNS, True
        return observation, ends

    async def _act(self, rollout: Rollout, text: str, after_last_turn: bool) -> tuple[str, bool]:
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
                rollout.exit_status = EndReason.FORMAT_ERRORS
                return observation + f"\n[{limit} malformed replies in a row: the episode ends]", True
            return observation, False

        rollout.consecutive_format_errors = 0
        assert rollout.sandbox is not None and rollout.workspace is not None
        left = rollout.seconds_left(s.rollout_time_limit)
        if left is not None and left <= 0:  # the agent's work so far is still evaluated (finish)
            rollout.exit_status = EndReason.TIME_LIMIT
            note = f"[the rollout's time limit ({s.rollout_time_limit:g} s) is up: the episode ends]"
            rollout.turns.append(Turn(index=number, model_text=text, command=parsed.command, output=note))
            return note, True
        command = guard_multiline(parsed.command, self.multiline) if self.multiline else parsed.command
        long = float(s.long_command_timeout or rollout.task.training_timeout)
        result = await rollout.sandbox.run(command, timeout=command_timeout(command, s.command_timeout, long, left))
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
            rollout.exit_status = EndReason.SUBMITTED
        return turn.output, submitted

    def _forfeit(self, rollout: Rollout, text: str, exc: ShellUnstartable) -> str:
        """End a rollout whose sandbox the agent broke (no shell starts for it): the no-score reward."""
        log.info("rollout of %s forfeited: %s", rollout.task.name, exc)
        return rollout.forfeit(text, parse_action(text, self.multiline).command, str(exc))

    async def _evaluate(self, rollout: Rollout, kind: str) -> tuple[Evaluation, TurnEvaluation, float]:
        assert rollout.workspace is not None
        evaluation = await rollout.workspace.evaluate()
        suspicious = evaluation.status == "suspicious"
        step_reward = rollout.tracker.record(evaluation.score if evaluation.ok else None, suspicious=suspicious)
        rollout.dirty = False
        return evaluation, TurnEvaluation.of(evaluation, kind), step_reward

    # --- end of a rollout ---------------------------------------------------------------------

    async def finish(self, rollout: Rollout, unplayed_reply: str | None = None) -> str | None:
        """The work left when the model's turns are over: the reply a max-turns stop left unplayed, and
        an evaluation of a workspace changed since its last one. Returns the last observation, if any."""
        observation = None
        try:
            if unplayed_reply is not None and not rollout.submitted and rollout.exit_status is None:
                try:
                    observation, _ = await self._play(rollout, unplayed_reply, True)
                except ShellUnstartable as exc:
                    observation = self._forfeit(rollout, unplayed_reply, exc)
            forfeited = rollout.tracker.forfeited
            if not rollout.submitted and not forfeited and (rollout.dirty or rollout.tracker.evaluations == 0):
                try:
                    _, rollout.final_evaluation, _ = await self._evaluate(rollout, "final")
                except ShellUnstartable as exc:  # root's evaluation refused by a container the agent broke
                    observation = self._forfeit(rollout, "", exc)
            elif rollout.turns and rollout.turns[-1].evaluation is not None:
                rollout.final_evaluation = rollout.turns[-1].evaluation
        except (SandboxError, *DOCKER_ERRORS) as exc:
            fault, cause = await self._fault(rollout, exc, "finishing the rollout")
            raise fault from cause
        except Exception as exc:
            log.exception("unexpected failure finishing a rollout")
            raise EnvFault(f"finishing the rollout failed unexpectedly: {exc!r}") from exc
        return observation

    def shutdown(self) -> None:
        """Remove every container this process started. Synchronous: it also runs from atexit."""
        if self._pool is not None:
            cleanup_all()
