"""The sandbox against real containers: persistence, timeouts, output caps, death, files, limits."""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from air.sandbox.config import LABEL, LABEL_PID, SandboxConfig, owner_labels, parse_env_gpu
from air.sandbox.container import Sandbox, container_kwargs
from air.sandbox.errors import SandboxDied
from rigs.patience import backstop
from tests.containers import existing

pytestmark = pytest.mark.docker


async def test_cwd_variables_and_functions_persist(sandbox: Sandbox) -> None:
    assert (await sandbox.run('cd /tmp && export GREETING=hi && shout() { echo "$1!"; }')).exit_code == 0
    result = await sandbox.run("pwd; echo $GREETING; shout hey")
    assert result.output == "/tmp\nhi\nhey!\n" and result.exit_code == 0
    assert sandbox.shell.cwd == "/tmp"


async def test_exit_codes_stderr_and_bad_syntax(sandbox: Sandbox) -> None:
    result = await sandbox.run("echo out; echo err >&2; exit_code() { return 4; }; exit_code")
    assert result.output == "out\nerr\n" and result.exit_code == 4
    broken = await sandbox.run("if then fi (")
    assert broken.exit_code == 2 and "syntax error" in broken.output
    assert (await sandbox.run("echo ${NOPE:?missing}")).exit_code != 0
    assert (await sandbox.run("echo still here")).output == "still here\n"


async def test_runs_as_agent_in_the_workspace(sandbox: Sandbox) -> None:
    result = await sandbox.run("id -un; pwd; python3 -c 'import sklearn, pandas, numpy; print(\"ok\")'")
    assert result.output.split() == ["agent", "/home/agent/workspace", "ok"]


@pytest.fixture
async def patient(sandbox_config: SandboxConfig):
    """A sandbox that waits up to a minute for its shell after a timeout's kill (interrupt_grace_s, 5 s by
    default) before restarting it: these tests check that the shell is kept, and a loaded host (two suites
    side by side on two cores) can take longer than 5 s to answer."""
    sb = await Sandbox.create(sandbox_config.model_copy(update={"interrupt_grace_s": 60.0}))
    try:
        yield sb
    finally:
        await sb.destroy()


async def test_timeout_kills_the_command_and_keeps_the_shell(patient: Sandbox) -> None:
    await patient.run("export KEEP=me; cd /tmp")
    result = await patient.run("echo started; sleep 300; echo never", timeout=1)
    assert result.timed_out and "started" in result.output and "never" not in result.output
    assert "timed out" in result.output and not result.shell_restarted
    after = await patient.run("echo $KEEP; pwd; pgrep -f 'sleep 300' || echo no-sleep")
    assert after.output == "me\n/tmp\nno-sleep\n"


async def test_a_kill_the_engine_starts_late_still_kills_the_command(
    patient: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy engine (two suites side by side) started the kill's exec seconds after the timeout; the kill
    took its cutoff from its own start, so it spared the command and the shell was restarted. Staged here:
    the kill's exec starts 2 s late."""
    real_exec_run = patient.container.exec_run
    delayed: list[str] = []

    def exec_run_late(argv, *args, **kwargs):
        if "killtree" in argv:
            delayed.append(argv[0])
            time.sleep(2.0)
        return real_exec_run(argv, *args, **kwargs)

    monkeypatch.setattr(patient.container, "exec_run", exec_run_late)
    await patient.run("export KEEP=me")
    result = await patient.run("echo started; sleep 300; echo never", timeout=1)
    assert delayed, "the kill was not staged: no killtree exec"
    assert result.timed_out and "never" not in result.output and not result.shell_restarted
    after = await patient.run("echo $KEEP; pgrep -f 'sleep 300' || echo no-sleep")
    assert after.output == "me\nno-sleep\n"


async def test_timeout_of_a_builtin_loop_keeps_the_shell(patient: Sandbox) -> None:
    await patient.run("export KEEP=me")
    result = await patient.run("while true; do :; done", timeout=1)
    assert result.timed_out and not result.shell_restarted
    assert (await patient.run("echo $KEEP")).output == "me\n"


async def test_timeout_spares_earlier_background_jobs(patient: Sandbox) -> None:
    await patient.run("sleep 600 >/dev/null 2>&1 &")
    # The job must be older than the kill's cutoff: a quarter second before the command's start, mapped into
    # the container's clock with the error of one round trip at the shell's start (well under 3 s, even loaded).
    await asyncio.sleep(3)
    assert (await patient.run("sleep 300", timeout=1)).timed_out
    assert (await patient.run("pgrep -f 'sleep 300' || echo none")).output == "none\n"
    assert (await patient.run("pgrep -c -f 'sleep 600'")).output.strip() == "1"


async def test_huge_output_is_capped_with_bounded_memory(sandbox: Sandbox) -> None:
    tracemalloc.start()
    try:
        result = await sandbox.run("yes | head -c 200M; echo; echo THE-END", timeout=backstop(120))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cap = sandbox.config.max_output_bytes
    assert result.truncated and result.output_bytes > 200 * 1024 * 1024
    assert len(result.output) <= cap + 200
    assert result.output.startswith("y\ny\n") and result.output.endswith("THE-END\n")
    assert peak < 16 * cap  # a few chunks of slack, never the 200 MB
    assert (await sandbox.run("echo fine")).output == "fine\n"


async def test_killed_container_raises_the_typed_error(sandbox: Sandbox) -> None:
    await asyncio.to_thread(sandbox.container.kill)
    with pytest.raises(SandboxDied, match="container"):
        await sandbox.run("echo hello", timeout=backstop(10))


@pytest.mark.parametrize("ending", ["kill -9 $$", "exec true", "kill -9 $PPID $$"])
async def test_a_shell_the_agent_ends_is_replaced_and_the_agent_told(sandbox: Sandbox, ending: str) -> None:
    await sandbox.run("mkdir -p /tmp/here && cd /tmp/here && echo kept > note && export GONE=1")
    old_pid = sandbox.shell.pid
    result = await sandbox.run(f"echo before; {ending}", timeout=backstop(30))
    assert result.shell_restarted and result.exit_code is None and not result.timed_out
    assert result.output.startswith("before\n") and "a new shell was started in /tmp/here" in result.output
    assert sandbox.shell.pid != old_pid
    after = await sandbox.run("pwd; cat note; echo ${GONE:-unset}; id -un")
    assert after.output == "/tmp/here\nkept\nunset\nagent\n" and after.exit_code == 0


async def test_a_shell_killed_between_commands_is_replaced(sandbox: Sandbox) -> None:
    await sandbox.exec_root(["kill", "-KILL", str(sandbox.shell.pid)])
    result = await sandbox.run("echo hello", timeout=backstop(10))
    assert result.shell_restarted and "a new shell was started" in result.output
    assert (await sandbox.run("echo hello")).output == "hello\n"


async def test_the_agent_cannot_end_its_container(sandbox: Sandbox) -> None:
    """pid 1 (docker-init) and the keep-alive are root's: no signal or trace of the agent reaches them."""
    owners = await sandbox.run("ps -o user=,args= -p 1; ps -o user= -C sleep")
    assert owners.output.split("\n")[0].split()[0] == "root" and owners.output.split()[-1] == "root"
    for attempt in ["kill -9 1", "kill -STOP 1", "pkill -9 -x sleep", "kill -9 -1"]:
        await sandbox.run(attempt, timeout=backstop(30))
    trace = await sandbox.run(
        "python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.ptrace(16, 1, 0, 0), os.strerror(ctypes.get_errno()))'"  # 16: PTRACE_ATTACH
    )
    assert trace.output.strip() == "-1 Operation not permitted"
    await asyncio.to_thread(sandbox.container.reload)
    assert sandbox.container.status == "running"
    assert (await sandbox.run("echo still here")).output == "still here\n"


async def test_no_setuid_program_raises_the_agents_rights(sandbox: Sandbox) -> None:
    setuid = await sandbox.exec_root(
        ["bash", "-c", "cp /bin/id /usr/local/bin/rootid && chmod 4755 /usr/local/bin/rootid"]
    )
    assert setuid[0] == 0, setuid
    uid = str(sandbox.shell.agent_uid)
    assert (await sandbox.run("/usr/local/bin/rootid -u; id -u")).output.split() == [uid, uid]


async def test_exit_in_the_shell_is_refused(sandbox: Sandbox) -> None:
    result = await sandbox.run("exit 1")
    assert "exit is disabled" in result.output
    assert (await sandbox.run("(exit 7)")).exit_code == 7
    assert (await sandbox.run("echo alive")).output == "alive\n"


async def test_files_copy_in_and_out(sandbox: Sandbox, tmp_path) -> None:
    folder = tmp_path / "bundle"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("alpha\n")
    (folder / "sub" / "b.bin").write_bytes(bytes(range(256)))
    await sandbox.copy_in(folder, "/home/agent/workspace", owner="agent")
    listing = await sandbox.run("stat -c '%U %n' bundle bundle/sub/b.bin; cat bundle/a.txt")
    assert listing.output == "agent bundle\nagent bundle/sub/b.bin\nalpha\n"
    await sandbox.run("echo made-inside > bundle/out.txt")
    back = await sandbox.copy_out("/home/agent/workspace/bundle", tmp_path / "back")
    assert (back / "out.txt").read_text() == "made-inside\n"
    assert (back / "sub" / "b.bin").read_bytes() == bytes(range(256))
    await sandbox.write_file("/home/agent/workspace/note.txt", "written\n", owner="agent")
    assert await sandbox.read_file("/home/agent/workspace/note.txt") == b"written\n"
    await sandbox.write_file("/home/agent/new/deeper/made.txt", "made\n")  # missing folders are made
    assert await sandbox.read_file("/home/agent/new/deeper/made.txt") == b"made\n"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("/nope/nothing")


async def test_limits_labels_and_network(sandbox: Sandbox) -> None:
    attrs = sandbox.container.attrs
    host = attrs["HostConfig"]
    assert host["NanoCpus"] == 10**9 and host["Memory"] == 1024**3 and host["PidsLimit"] == 1024
    assert host["NetworkMode"] == "none" and host["Init"] is True
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL] == "1" and labels["air.run"] == "pytest" and labels[LABEL_PID].isdigit()
    interfaces = (await sandbox.run("ls /sys/class/net")).output.split()
    assert interfaces == ["lo"]


def test_gpu_strings_become_device_requests() -> None:
    assert parse_env_gpu("7") == ["7"] and parse_env_gpu("6, 7") == ["6", "7"] and parse_env_gpu(None) == []
    for bad in ("gpu7", "6,,7", "6,6", "-1"):
        with pytest.raises(ValueError):
            parse_env_gpu(bad)
    kwargs = container_kwargs(SandboxConfig(image="x", env_gpu="6,7", network=True), owner_labels("r"))
    (request,) = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["6", "7"] and request["Capabilities"] == [["gpu"]]
    assert kwargs["network_mode"] == "bridge"
    assert "device_requests" not in container_kwargs(SandboxConfig(image="x"), owner_labels("r"))
    with pytest.raises(ValueError, match="env_gpu"):
        SandboxConfig(env_gpu="all-of-them")


async def test_32_sessions_from_one_event_loop(sandbox_config: SandboxConfig) -> None:
    config = sandbox_config.model_copy(update={"cpus": 0.5, "memory": "256m", "tmp_size": "64m", "shm_size": "32m"})
    sandboxes = await asyncio.gather(*(Sandbox.create(config) for _ in range(32)))
    try:

        async def session(index: int, sb: Sandbox) -> list[str]:
            outputs = []
            for step in range(5):
                result = await sb.run(f"export STEP={step}; sleep 0.05; echo {index}-$STEP")
                outputs.append(result.output.strip())
            return outputs

        # The event loop must stay responsive while 32 shells run: a ticker measures it.
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(session(i, sb) for i, sb in enumerate(sandboxes)))
        tick_task.cancel()
        assert results == [[f"{i}-{s}" for s in range(5)] for i in range(32)]
        assert ticks > 10
    finally:
        await asyncio.gather(*(sb.destroy() for sb in sandboxes))
    assert not existing(sb.id for sb in sandboxes)


@pytest.mark.docker
async def test_a_missing_image_is_its_own_error_naming_the_fix(docker_image: str) -> None:
    """With no registry reachable, the SDK's pull-on-missing fails with a pull error: still named as missing."""
    from air.sandbox.errors import SandboxImageMissing

    with pytest.raises(SandboxImageMissing, match="uv run air build-image"):
        await Sandbox.create(SandboxConfig(image="air-sandbox:no-such-recipe-0000", run_id="pytest"))
