"""One rollout against another, and against the host (issue 31, item 4a): two sandboxes, as two rollouts of
one env server have, probed from the agent's shell in A.

A sees none of B's processes and cannot signal them (its own pid namespace: B's pids, as the host numbers
them, do not exist in A); none of B's files (its own mount namespace and tmpfs mounts); no Docker socket and
no engine listening; and no network at all (only ``lo``: a TCP connect to a server the test starts on the
host, at the Docker bridge's gateway and at every non-loopback address of the host, fails). Every probe is
first shown to find what it looks for: A's own process, files, socket and listener, and the host's server
from a sandbox given a network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator

import docker
import psutil
import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox
from air.sandbox.errors import SandboxStartError
from rigs.patience import backstop

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]  # stretched by rigs/patience.py (conftest)

NAMESPACES = ("pid", "mnt", "net", "ipc", "uts")


@pytest.fixture
async def two(sandbox_config: SandboxConfig) -> AsyncIterator[tuple[Sandbox, Sandbox]]:
    """Rollouts A and B: two sandboxes of one run, as an env server's pool hands them out. Without a disk limit:
    the disk watch's probe would come and go among the processes the test lists and expects to live on."""
    sandbox_config = sandbox_config.model_copy(update={"disk": ""})
    a, b = await asyncio.gather(Sandbox.create(sandbox_config), Sandbox.create(sandbox_config))
    try:
        yield a, b
    finally:
        await asyncio.gather(a.destroy(), b.destroy())


async def agent(sb: Sandbox, command: str) -> str:
    """The agent's shell runs ``command``: quick on an idle machine, its timeout only a backstop against a hang."""
    result = await sb.run(command, timeout=backstop(60))
    assert not result.timed_out, (command, result.output)
    return result.output


def mark() -> str:
    return f"air-iso-{uuid.uuid4().hex[:12]}"


async def start_named(sb: Sandbox, name: str) -> int:
    """A process of the agent's whose command line carries ``name``; its pid as the container numbers it. Returns
    once the name is in its /proc/<pid>/cmdline: ``$!`` is the subshell, which carries the shell's command line
    until it gets a CPU to exec in (under load, after the next command has listed /proc). A process that died
    first ends the wait too, and the caller's listing says so."""
    wait = f"until grep -qa {name} /proc/$p/cmdline 2>/dev/null || ! kill -0 $p 2>/dev/null; do sleep 0.05; done"
    out = await agent(sb, f"(exec -a {name} sleep 600) >/dev/null 2>&1 & p=$!; {wait}; echo $p")
    return int(out.split()[-1])


# The pids whose command line carries a mark; `[a]ir-iso-...`: a pattern that does not match grep's own.
LISTING = "grep -l -a -e '[a]{}' /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 | sort -n"


def host_pids(sb: Sandbox) -> list[int]:
    """The container's processes as the host numbers them: its main process and everything `docker top` lists."""
    sb.container.reload()
    top = sb.container.top()
    column = top["Titles"].index("PID")
    return sorted({int(sb.container.attrs["State"]["Pid"]), *(int(p[column]) for p in top["Processes"])})


async def test_another_rollouts_processes_are_out_of_sight_and_reach(two: tuple[Sandbox, Sandbox]) -> None:
    a, b = two
    name_a, name_b = mark(), mark()
    pid_a, pid_b = await start_named(a, name_a), await start_named(b, name_b)
    # A's /proc shows its own process and none of B's.
    assert (await agent(a, LISTING.format(name_a[1:]))).split() == [str(pid_a)]
    assert (await agent(a, LISTING.format(name_b[1:]))).split() == []
    assert name_b not in await agent(a, "ps -eo pid,user,args")
    # Each container is its own namespace of each kind: A's differ from B's and from the host's process's.
    probe = "; ".join(f"readlink /proc/self/ns/{ns}" for ns in NAMESPACES)
    seen_a, seen_a_again, seen_b = [(await agent(sb, probe)).split() for sb in (a, a, b)]
    host = [os.readlink(f"/proc/self/ns/{ns}") for ns in NAMESPACES]
    assert seen_a == seen_a_again and len(seen_a) == len(NAMESPACES)  # the probe reads something stable
    for ns, in_a, in_b, on_host in zip(NAMESPACES, seen_a, seen_b, host, strict=True):
        assert in_a.startswith(f"{ns}:[") and in_a != in_b and in_a != on_host, (ns, in_a, in_b, on_host)
    # B's processes, as the host numbers them (its main process among them), do not exist in A: a signal finds
    # nothing to hit, and B's processes live on.
    targets = host_pids(b)
    assert len(targets) >= 4, targets  # docker-init, the keep-alive sleep, B's shell and its named process
    tried = await agent(a, f"for p in {' '.join(map(str, targets))}; do test -e /proc/$p && echo seen $p; "
                           f"kill -9 $p 2>&1; kill -STOP $p 2>&1; done; true")  # fmt: skip
    assert "seen" not in tried and tried.count("No such process") == 2 * len(targets), tried
    assert (await agent(b, f"kill -0 {pid_b} && echo alive")).strip() == "alive"
    b.container.reload()
    assert b.container.status == "running" and set(targets) <= set(host_pids(b))  # every one lives on
    # The same kill reaches A's own process: the signal was not what failed.
    # `wait`: the shell reaps its job once the kill has landed (until then kill -0 finds the process, or its zombie).
    killed = await agent(a, f"kill -9 {pid_a}; wait {pid_a} 2>/dev/null; kill -0 {pid_a} 2>&1 || true")
    assert killed.count("No such process") == 1, killed


async def test_a_named_process_is_listed_once_started_even_in_a_busy_container(sandbox: Sandbox) -> None:
    """The rig above under load (issue 53, item 6): A's listing of its own named process once came back empty,
    the process started but not yet exec'ed under its name. Busy loops taking the container's CPU make that
    likely (4 listings in 20 on an idle host); start_named waits for the name, so none is ever missed."""
    await agent(sandbox, "for i in $(seq 30); do (while :; do :; done) >/dev/null 2>&1 & done")
    try:
        for _ in range(20):
            name = mark()
            pid = await start_named(sandbox, name)
            assert (await agent(sandbox, LISTING.format(name[1:]))).split() == [str(pid)], name
    finally:
        await agent(sandbox, "kill $(jobs -p) 2>/dev/null; true")


# Every entry of the container's filesystem, mounts (/tmp, /dev/shm) included; /proc and /sys are the kernel's.
# Each one lstat'ed: a bind-mounted socket is a plain file in its directory's listing, where `find -type s` looks.
WALK = """import os, stat
def walk(top):
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        if entry.path in ("/proc", "/sys"):
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode):
            print("socket", entry.path)
        if entry.name.startswith("air-iso-"):
            print("marked", entry.path)
        if stat.S_ISDIR(mode):
            walk(entry.path)
walk("/")
"""


async def walk(sb: Sandbox, kind: str) -> list[list[str]]:
    """What the agent's shell finds of ``kind`` (socket, marked), and what root finds in the same container."""
    seen = await agent(sb, f"python3 - <<'EOF'\n{WALK}EOF")
    code, as_root = await sb.exec_root(["python3", "-c", WALK])
    assert code == 0, as_root
    return [sorted(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(f"{kind} "))
            for out in (seen, as_root)]  # fmt: skip


async def test_another_rollouts_files_are_nowhere_in_sight(two: tuple[Sandbox, Sandbox]) -> None:
    a, b = two
    name_a, name_b = mark(), mark()
    places = ["/home/agent", "/home/agent/workspace", "/tmp", "/dev/shm"]
    for sb, name in ((a, name_a), (b, name_b)):
        await agent(sb, " && ".join(f"echo secret > {place}/{name}" for place in places))
    assert await walk(b, "marked") == [sorted(f"{p}/{name_b}" for p in places)] * 2
    # A finds its own four files and nothing of B's, neither as the agent nor as root, by name or by content.
    assert await walk(a, "marked") == [sorted(f"{p}/{name_a}" for p in places)] * 2
    assert (await agent(a, f"grep -rl {name_b} /home /tmp /dev/shm 2>/dev/null; true")).strip() == ""


async def listen(sb: Sandbox, path: str) -> int:
    """The agent listens on a unix socket at ``path`` and on a TCP port of loopback; the port."""
    started = await agent(
        sb,
        "python3 -c 'import socket, sys, time\n"
        f'u = socket.socket(socket.AF_UNIX); u.bind("{path}"); u.listen()\n'
        't = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen(); print(t.getsockname()[1], flush=True)\n'
        "sys.stdout.close(); time.sleep(600)' > /tmp/port & p=$!; "
        "until test -s /tmp/port || ! kill -0 $p 2>/dev/null; do sleep 0.1; done; cat /tmp/port",  # listening, or dead
    )
    return int(started.split()[-1])  # after the shell's job line


async def test_no_docker_socket_and_no_engine_in_reach(two: tuple[Sandbox, Sandbox]) -> None:
    a, b = two
    own, theirs = f"/tmp/{mark()}.sock", f"/tmp/{mark()}.sock"
    port, _ = await listen(a, own), await listen(b, theirs)
    # Unix sockets: A's own is the only one in its filesystem (for the agent and for root) and in its network
    # namespace: not B's, not the engine's.
    assert await walk(a, "socket") == [[own], [own]]
    assert (await agent(a, "awk 'NR > 1 && $8 {print $8}' /proc/net/unix | sort -u")).split() == [own]
    known = "/var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /var/run/docker"
    assert (await agent(a, f"ls -d {known} 2>&1 | grep -vc 'No such file'; env | grep -ci docker; true")).split() == [
        "0", "0"
    ]  # fmt: skip
    # TCP: nothing listens but A's own port (B's is in B's network namespace), nor Docker's (2375, 2376).
    listening = await agent(a, "awk 'NR > 1 && $4 == \"0A\" {print $2}' /proc/net/tcp /proc/net/tcp6")
    assert [int(entry.rsplit(":", 1)[1], 16) for entry in listening.split()] == [port], listening
    tried = await agent(a, connect_script(["127.0.0.1"], [port, 2375, 2376]))
    assert tried.splitlines() == [
        f"127.0.0.1:{port} connected",
        "127.0.0.1:2375 ECONNREFUSED",
        "127.0.0.1:2376 ECONNREFUSED",
    ], tried


def connect_script(hosts: list[str], ports: list[int]) -> str:
    """The agent's TCP connect to each (host, port): one line each, ``connected`` or the error's errno name."""
    pairs = json.dumps([[h, p] for h in hosts for p in ports])  # double quotes: the script is in single ones
    return (
        "python3 -c 'import errno, socket\n"
        f"for host, port in {pairs}:\n"
        "    try:\n"
        '        socket.create_connection((host, port), timeout=60).close(); said = "connected"\n'
        "    except OSError as exc:\n"
        "        said = errno.errorcode.get(exc.errno, repr(exc))\n"
        '    print(f"{host}:{port} {said}")\''
    )


class HostServer:
    """A TCP server on the host, on every IPv4 address (0.0.0.0), recording who connected."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.peers: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            self.peers.append(peer[0])
            conn.close()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=backstop(5))
        self.sock.close()


@pytest.fixture
def host_server() -> Iterator[HostServer]:
    server = HostServer()
    try:
        yield server
    finally:
        server.close()


def host_addresses() -> tuple[list[str], list[str]]:
    """(the Docker bridge networks' gateways, every other non-loopback IPv4 address of this host)."""
    client = docker.from_env()
    try:
        networks = client.networks.list(filters={"driver": "bridge"})
        gateways = sorted({c["Gateway"] for n in networks for c in (n.attrs.get("IPAM") or {}).get("Config") or []
                           if c.get("Gateway") and ipaddress.ip_address(c["Gateway"]).version == 4})  # fmt: skip
    finally:
        client.close()
    others = {
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback
    }
    return gateways, sorted(others - set(gateways))


async def test_no_network_to_the_host(sandbox: Sandbox, sandbox_config: SandboxConfig, host_server: HostServer) -> None:
    a = sandbox
    gateways, others = host_addresses()
    targets = gateways + others
    assert targets, "this host has no non-loopback IPv4 address to try"
    interfaces = "awk -F: 'NR > 2 {gsub(/ /, \"\", $1); print $1}' /proc/net/dev | sort"
    assert (await agent(a, interfaces)).split() == ["lo"]
    tried = (await agent(a, connect_script(targets, [host_server.port]))).splitlines()
    assert tried == [f"{host}:{host_server.port} ENETUNREACH" for host in targets], tried  # no route: no interface
    assert host_server.peers == []
    if not gateways:
        pytest.skip("no Docker bridge network: the control with a network cannot run (A's probe above did)")
    # The control: a sandbox given a network reaches the same server through the bridge's gateway, so the
    # probe and the server would have shown a way through.
    try:
        networked = await Sandbox.create(sandbox_config.model_copy(update={"network": True}))
    except SandboxStartError as exc:  # the engine's bridge is broken (docker0 gone): A's probes above still ran
        pytest.skip(f"the control with a network cannot start: {exc}")
    try:
        assert "eth0" in (await agent(networked, interfaces)).split()
        reached = await agent(networked, connect_script(gateways, [host_server.port]))
    finally:
        await networked.destroy()
    assert any(line.endswith(" connected") for line in reached.splitlines()), reached
    assert host_server.peers, "the host's server saw no connection from the networked sandbox"
