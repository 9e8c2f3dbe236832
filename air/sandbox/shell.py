"""One persistent bash in a container, spoken to through a ``docker exec`` socket.

The exec's stdin/stdout is the SDK's hijacked socket, driven with asyncio's non-blocking socket
calls: no thread per command, so one event loop drives many shells. The wire protocol (quoting,
markers, capped output) is ``air.sandbox.protocol``; the container's life is ``air.sandbox.container``.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from docker.models.containers import Container

from air.sandbox.engine import DOCKER_ERRORS
from air.sandbox.errors import SandboxDied, SandboxError, ShellEnded, ShellUnstartable
from air.sandbox.fault import container_fault
from air.sandbox.keep_alive import free_the_agents_pids
from air.sandbox.memory_full import memory_full
from air.sandbox.pids_full import pids_full
from air.sandbox.protocol import (
    SHELL_ENV,
    Capture,
    FrameDecoder,
    new_nonce,
    recovery_line,
    shell_argv,
    shell_setup,
    wrap_command,
)
from air.sandbox.root_side import as_user_argv, find_shell_argv, kill_tree_argv, kill_user_argv, parse_found

if TYPE_CHECKING:
    from air.sandbox.config import SandboxConfig


# An MLGym image keeps its Python in a conda env; when present it goes first on the agent's PATH.
MLGYM_CONDA_BIN = "/home/agent/miniconda3/envs/mlgym_generic/bin"


@dataclass(frozen=True)
class CommandResult:
    """What one shell command did."""

    output: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    truncated: bool = False
    output_bytes: int = 0
    shell_restarted: bool = False
    halted: bool = False  # stopped by ``Shell.halt`` (the disk watch), its note at the end of the output


# Appended to the output of a command during which the agent's shell ended.
ENDED_NOTE = (
    "\n[the shell ended during this command (killed, or replaced by exec); a new shell was started in {cwd}. "
    "Files are intact; shell variables, functions and jobs of the old shell are gone]"
)

FREED_NOTE = (
    "\n[no new shell could start: the container's process limit was reached. Every process of the agent was "
    "killed (background jobs included) and a new shell was started in {cwd}. Files are intact]"
)

TICKS_PER_S = 100  # /proc's clock ticks (USER_HZ)
# A new shell answers and can fork. Its answer proves only that: its pid and clock come from root's side.
_READY = "(:)"


class Shell:
    """One persistent bash in a container, spoken to through an exec socket."""

    def __init__(self, container: Container, config: SandboxConfig) -> None:
        self._container = container
        self._config = config
        self._sock: socket.socket | None = None
        # The SDK's wrapper around the hijacked connection; it holds the HTTP response that owns the
        # connection. Dropped, the response is collected some time later and may close or pool the
        # connection under the live shell (seen once: EBADF mid-command with 32 shells in one loop).
        self._sock_owner: Any = None
        self._decoder = FrameDecoder()
        self.lock = asyncio.Lock()  # held while a command runs (the disk watch kills only between two)
        self.pid: int | None = None
        # /proc's clock (ticks since boot, as process start times count) minus perf_counter's, in ticks, read at
        # start; never above the true offset, so a command's start maps to or before its real one.
        self._tick_offset = 0.0
        self.cwd: str = config.workdir
        # Session set-up (functions, variables) replayed whenever the shell is (re)started.
        self.init_script: str | None = None
        self._freed = False  # the last restart had to kill every process of the agent first
        self._freed_rounds = 0  # the container keep-alive's kills asked for (keep_alive)
        self.agent_uid: int | None = None  # the uid the agent takes at the first start (agent_uid); None: the image's
        self._halt = asyncio.Event()  # set by ``halt``: the command in flight is interrupted
        self._halt_note = ""

    async def start(self, cwd: str | None = None) -> None:
        api = self._container.client.api
        name = f"air-shell-{new_nonce()}"  # this start's own argv[0], by which root finds it (root_side)

        def _open() -> tuple[socket.socket, Any]:
            exec_id = api.exec_create(
                self._container.id,
                as_user_argv(self._config.user, shell_argv(self._config.max_file_bytes, name), self.agent_uid),
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                user="root",  # the agent's only once it runs (root_side.as_user_argv)
                workdir="/",  # always there: the setup line goes to the shell's folder (shell_setup)
                environment=SHELL_ENV,
            )["Id"]
            raw = api.exec_start(exec_id, socket=True)
            sock = raw._sock  # the hijacked connection under the SDK's SocketIO wrapper
            sock.setblocking(False)
            return sock, raw

        try:
            self._sock, self._sock_owner = await asyncio.to_thread(_open)
        except DOCKER_ERRORS as exc:
            raise await self._died(f"cannot start a shell in container {self._container.short_id}: {exc}") from exc
        self._decoder = FrameDecoder()
        loop = asyncio.get_running_loop()
        # An MLGym image's conda env goes first on PATH; start where the shell was (after a restart).
        setup = shell_setup(path_prepend=MLGYM_CONDA_BIN, cwd=cwd or self._config.workdir, workdir=self._config.workdir)
        await loop.sock_sendall(self._sock, setup)
        # The shell answers and can fork (all pids taken: see _start_again). Any process of the agent can write to
        # its stdin, so what it prints proves nothing more: its pid and the clock come from root's side.
        result = await self._run_locked(_READY, timeout=30, interruptible=False)
        if result.exit_code != 0:
            self.close()
            raise ShellEnded(f"shell did not start properly: {result.output[-300:]!r}")
        self.pid, self._tick_offset = await self._identify(name)
        if self.init_script:
            await self._run_init()

    async def _identify(self, name: str) -> tuple[int, float]:
        """The shell's pid, and /proc's clock less perf_counter's (in ticks), as root's own exec finds them."""
        try:
            result = await asyncio.to_thread(self._container.exec_run, find_shell_argv(name), user="root", workdir="/")
        except DOCKER_ERRORS as exc:
            raise await self._died(f"cannot look for the new shell as root: {exc}") from exc
        answered = time.perf_counter()  # root's exec started before this: its offset is never above the true one
        output = result.output.decode("utf-8", "replace")
        found = parse_found(output)
        if found is None:
            raise await self._died(f"root's look for the new shell failed (exit {result.exit_code}): {output[-300:]!r}")
        pid, now_ticks = found
        if pid is None:  # ended, or exec'd away, since it answered: the agent's processes can do both
            self.close()
            raise ShellEnded("the new shell ended before root found it")
        return pid, now_ticks - answered * TICKS_PER_S

    async def initialize(self, script: str) -> None:
        """Run ``script`` in the shell now and again after any restart."""
        self.init_script = script
        async with self.lock:
            await self._run_init()

    async def _run_init(self) -> None:
        assert self.init_script is not None
        result = await self._run_locked(self.init_script, timeout=60, interruptible=False)
        if result.exit_code != 0:  # in the agent's shell, which its processes reach: a restart kills them first
            self.close()
            raise ShellEnded(f"shell session set-up failed (exit {result.exit_code}): {result.output[-500:]!r}")

    def halt(self, note: str) -> None:
        """Interrupt the command in flight as a timeout would, ``[note]`` ending its output; none in flight, nothing."""
        self._halt_note = note
        self._halt.set()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        self._sock_owner = None

    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run one of the agent's commands. A shell the command ends (``kill -9 $$``, ``exec``) is replaced
        and the output says so; only a container that stopped raises (``SandboxDied``)."""
        async with self.lock:
            return await self._run_locked(command, timeout, replace_ended=True)

    async def _run_locked(
        self, command: str, timeout: float | None, *, replace_ended: bool = False, interruptible: bool = True
    ) -> CommandResult:
        if self._sock is None:
            raise SandboxDied("shell is closed")
        timeout = self._config.command_timeout_s if timeout is None else timeout
        nonce = new_nonce()
        capture = Capture(self._config.max_output_bytes, (nonce,))
        start = time.perf_counter()
        timed_out = halted = restarted = False
        self._halt.clear()  # a halt asked between two commands is not this one's
        try:
            await self._send(wrap_command(command, nonce))
            stop = await self._wait_done(capture, timeout, haltable=interruptible)
            if stop is not None:
                if not interruptible:  # the shell's own set-up: no interrupt and restart (which would run it again)
                    self.close()
                    raise ShellEnded(f"the shell did not answer within {timeout:g} s")
                timed_out, halted = stop == "timeout", stop == "halt"
                restarted = not await self._interrupt(capture, start)
        except ShellEnded as ended:
            if not replace_ended:
                raise
            freed = await self._replace_ended(ended)
            return CommandResult(
                output=capture.text() + (FREED_NOTE if freed else ENDED_NOTE).format(cwd=self.cwd),
                exit_code=None,
                duration_s=time.perf_counter() - start,
                truncated=capture.truncated,
                output_bytes=capture.total,
                shell_restarted=True,
            )
        output = capture.text()
        if timed_out or halted:
            why = f"command timed out after {timeout:g} s and was interrupted" if timed_out else self._halt_note
            why += "; the shell was restarted, so exported variables were reset" if restarted else ""
            output += f"\n[{why}]" + (FREED_NOTE.format(cwd=self.cwd) if restarted and self._freed else "")
        if capture.cwd:
            self.cwd = capture.cwd
        return CommandResult(
            output=output,
            exit_code=None if restarted else capture.exit_code,
            duration_s=time.perf_counter() - start,
            timed_out=timed_out,
            truncated=capture.truncated,
            output_bytes=capture.total,
            shell_restarted=restarted,
            halted=halted,
        )

    async def _wait_done(self, capture: Capture, timeout: float, *, haltable: bool) -> str | None:
        """Read until the command's marker: None when it came, else why to interrupt it ("timeout", "halt")."""
        reading = asyncio.ensure_future(self._read_until_done(capture))
        waits = {reading, asyncio.ensure_future(self._halt.wait())} if haltable else {reading}
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
            # The reader gone before the interrupt reads the socket again; its error, if any, is retrieved.
            await asyncio.gather(*waits, return_exceptions=True)
        if reading in done:
            reading.result()  # ShellEnded, if the shell ended
            return None
        return "halt" if done else "timeout"

    async def _send(self, data: bytes) -> None:
        try:
            await asyncio.get_running_loop().sock_sendall(self._sock, data)
        except OSError as exc:
            raise await self._died(f"cannot write to shell: {exc}") from exc

    async def _read_until_done(self, capture: Capture, pending: bytes = b"") -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        if pending and capture.feed(pending):
            return
        while True:
            try:
                data = await loop.sock_recv(self._sock, 1 << 16)
            except OSError as exc:
                raise await self._died(f"shell connection broke: {exc}") from exc
            if not data:
                raise await self._died("shell exited")
            if capture.feed(self._decoder.feed(data)):
                return

    async def _interrupt(self, capture: Capture, started: float) -> bool:
        """Stop a timed-out command; True if the shell is usable again, False if it was replaced."""
        # The cutoff from the command's start, not from the kill's own: a busy engine starts that exec seconds
        # late (the command was then spared and the shell restarted). A quarter second earlier, for rounding.
        cutoff = int(self._tick_offset + (started - 0.25) * TICKS_PER_S)

        def _kill() -> None:
            assert self.pid is not None
            self._container.exec_run(kill_tree_argv(self.pid, cutoff), user="root", workdir="/")

        try:
            await asyncio.to_thread(_kill)
        except DOCKER_ERRORS as exc:
            raise await self._died(f"cannot interrupt command: {exc}") from exc
        # The interrupted line's own marker may or may not come; the recovery marker always does.
        recovery = new_nonce()
        await self._send(recovery_line(recovery))
        capture.add_nonce(recovery)
        grace = self._config.interrupt_grace_s
        try:
            await asyncio.wait_for(self._read_until_done(capture), grace)
            if capture.matched != recovery:
                drain = Capture(self._config.max_output_bytes, (recovery,))
                await asyncio.wait_for(self._read_until_done(drain, capture.rest), grace)
        except TimeoutError:
            await self._restart()
            return False
        if await asyncio.to_thread(pids_full, self._container):  # forks the tree's kill left behind hold them
            await self._restart()
            return False
        return True

    async def _replace_ended(self, ended: ShellEnded) -> bool:
        """A new shell for one the agent ended; True if the agent's processes had to be killed first."""
        try:
            return await self._start_again(self.cwd)
        except SandboxDied as exc:  # the host's (ShellUnstartable, the agent's, passes through)
            raise SandboxDied(f"{ended}; a new shell did not start: {exc}") from exc

    async def _start_again(self, cwd: str) -> bool:
        """Start a new shell. One that cannot start in a running container had its pids or memory taken by the
        agent's processes: root's keep-alive kills them and a shell is started once more (True), thrice at most (a
        process that outlived the ten seconds of passes, a start slowed by load); with every pid taken, the kill
        comes first. Masked only on proof that the host failed (the engine does not answer, the container was
        stopped or removed from outside); a container that runs, or that the OOM killer stopped, and still has no
        shell is the agent's doing (``ShellUnstartable``: its failure, penalised)."""
        if await asyncio.to_thread(pids_full, self._container):  # a shell would wait out its readiness check
            ended = ShellEnded("every pid of the container was taken")
        elif (ended := await self._try_start(cwd)) is None:
            return False
        for pause in (0.0, 1.0, 2.0):  # root's exec fails too while an OOM storm lasts; what it killed frees memory
            await asyncio.sleep(pause)
            try:  # by the keep-alive (no new process: see keep_alive), else by root's exec
                self._freed_rounds += 1
                if not await asyncio.to_thread(free_the_agents_pids, self._container, self._freed_rounds):
                    kill = kill_user_argv(self._config.user)
                    await asyncio.to_thread(self._container.exec_run, kill, user="root", workdir="/")
            except DOCKER_ERRORS as exc:  # refused by a container the agent filled, or an engine that went away
                fault = await self._died(f"cannot end the agent's processes to start a new shell: {exc}")
                if not isinstance(fault, ShellEnded):
                    raise fault from exc
            # Asked of the engine before another exec: each one into a full container is one more OOM kill, and once
            # the agent's are gone the killer takes the container's keep-alive (it stops, and that would mask).
            if full := await asyncio.to_thread(memory_full, self._container):  # the agent's files, not the host's
                raise ShellUnstartable(f"no new shell could start: {full}")
            if (ended := await self._try_start(cwd)) is None:
                return True
        fault = await self._died(str(ended))  # the engine's own word on the container: the host's proof, or none
        if isinstance(fault, ShellEnded):
            why = "every process of the agent was killed first, three times"
            message = f"no new shell could start although the container runs: {why} ({ended})"
            raise ShellUnstartable(message) from ended
        raise fault from ended

    async def _try_start(self, cwd: str) -> ShellEnded | None:
        """Start a shell in ``cwd``: None when it started, else why not (the shell closed)."""
        try:
            await self.start(cwd=cwd)
        except ShellEnded as exc:
            self.close()
            return exc
        return None

    async def _died(self, why: str) -> SandboxError:
        """The shell is closed; the error for ``why`` by the engine's word on the container (``fault``)."""
        self.close()
        return await asyncio.to_thread(container_fault, self._container, why)

    async def _restart(self) -> None:
        old_pid, cwd, self._freed = self.pid, self.cwd, False
        self.close()
        if old_pid:
            try:
                await asyncio.to_thread(
                    self._container.exec_run, ["kill", "-KILL", str(old_pid)], user="root", workdir="/"
                )
            except DOCKER_ERRORS as exc:
                raise await self._died(f"cannot restart the shell: {exc}") from exc
        self._freed = await self._start_again(cwd)
