"""Hosts of a test's own on one machine: a network namespace per host, joined to the root namespace by a veth
pair, with an address of its own from 10.0.0.0/8. A process started in one (``Net.command``) listens on a
real interface, not loopback, and the link can be cut and healed (the host end set down and up) or made to
lose packets. Nothing leaves the machine: the addresses route only to the veth pairs.

Several users at once on one host (xdist workers, another checkout's suite) never collide: names carry the
pid and a counter (retried on EEXIST), and each /30 is chosen, under a host-wide lock, among those no route
or address of the host overlaps, then taken by adding its address before the lock is let go.

Packet loss is dropped by nftables in the node's own namespace (both directions, each packet with the given
probability), not ``tc netem``: kernels built without sch_netem (this project's test VM) have nftables, and
rules in the namespace touch nothing of the host's and go with it."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rigs.host_lock import host_lock
from rigs.patience import backstop

COMMANDS = ("ip", "nft")
POOL = ipaddress.ip_network("10.0.0.0/8")
LOCK = Path("/run/lock/air-netns.lock") if Path("/run/lock").is_dir() else Path("/tmp/air-netns.lock")
INSIDE = "veth0"  # the node's end, created in its namespace: no name to share with anyone
LOSS_TABLE = "air_loss"
_counter = itertools.count(1)


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=backstop(30))
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done


def netns_problem() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add, ip link add)"
    missing = [command for command in COMMANDS if shutil.which(command) is None]
    if missing:
        return f"network namespaces with packet loss need {', '.join(missing)}: apt-get install -y iproute2 nftables"
    name = f"airprobe{os.getpid()}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"ip netns add failed ({made.stderr.strip()}): a container needs CAP_SYS_ADMIN and CAP_NET_ADMIN"
    _ip("netns", "del", name, check=False)
    return None


def require() -> None:
    """Skip the calling test with the reason where namespaces cannot be made (CI, which can, fails instead)."""
    import pytest

    problem = netns_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the network namespace tests must run in CI: {problem}")
        pytest.skip(problem)


@dataclass(frozen=True)
class Net:
    """One host of the test's own: its namespace, the veth end left in the root namespace, and the addresses
    at both ends (``address``: the node's, inside the namespace)."""

    ns: str
    host_end: str
    host_address: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this namespace (``ip netns exec`` execs it: the pid is the command's own)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(list(argv)), capture_output=True, text=True, timeout=backstop(30))
        if done.returncode != 0:
            raise NetnsError(f"{' '.join(argv)} in {self.ns} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def cut(self) -> None:
        """The cable pulled: the host end down (the node's end loses its carrier, the host its route)."""
        _ip("link", "set", self.host_end, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_end, "up")

    def lose(self, percent: int) -> None:
        """Drop ``percent`` % of the packets into and out of the node (100: everything, the link stays up)."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent={percent}: from 1 to 100")
        verdict = "drop" if percent == 100 else f"numgen random mod 100 < {percent} drop"
        chains = "".join(
            f"chain {hook} {{ type filter hook {hook} priority 0; policy accept; {verdict}; }}\n"
            for hook in ("input", "output")
        )
        script = f"table inet {LOSS_TABLE} {{\n{chains}}}\n"
        done = subprocess.run(
            self.command(["nft", "-f", "-"]), input=script, capture_output=True, text=True, timeout=backstop(30)
        )
        if done.returncode != 0:
            raise NetnsError(f"nft in {self.ns} refused the loss rules: {done.stderr.strip()}\n{script}")

    def stop_losing(self) -> None:
        self.run("nft", "delete", "table", "inet", LOSS_TABLE)


def _taken() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host routes or holds an address in (any table), default routes aside."""
    routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
    taken = [ipaddress.ip_network(r["dst"], strict=False) for r in routes if r.get("dst") not in (None, "default")]
    for link in json.loads(_ip("-j", "-4", "addr").stdout or "[]"):
        for info in link.get("addr_info", []):
            taken.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    return taken


def _free_subnet(taken: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    # A /30 anywhere in 10/8 (2^22 of them): a random pick all but never meets another user's; the check
    # (under the lock) makes sure of it and skips what the host itself uses (a VPN's 10.x route).
    for _ in range(1000):
        start = int(POOL.network_address) + 4 * random.randrange(1, 2**22 - 1)
        subnet = ipaddress.ip_network(f"{ipaddress.ip_address(start)}/30")
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise NetnsError(f"no free /30 in {POOL}: the host routes all of it; free a part or change rigs/netns.py's POOL")


def _make(made: list[Net]) -> Net:
    """One namespace with its veth pair and addresses, appended to ``made`` as soon as there is anything to
    remove (so a failure half-way is cleaned up too)."""
    pid = os.getpid()
    for _ in range(100):
        count = next(_counter)
        ns, host_end = f"air-{pid}-{count}", f"a{pid}h{count}"  # at most 15: a{7 digits}h{6}
        if _ip("netns", "add", ns, check=False).returncode == 0:
            break
    else:
        raise NetnsError(f"ip netns add air-{pid}-N kept failing: see `ip netns list`")
    partial = Net(ns=ns, host_end=host_end, host_address="", address="")
    made.append(partial)
    _ip("link", "add", host_end, "type", "veth", "peer", "name", INSIDE, "netns", ns)
    with host_lock(LOCK):
        subnet = _free_subnet(_taken())
        host_address, address = (str(host) for host in subnet.hosts())
        _ip("addr", "add", f"{host_address}/30", "dev", host_end)
    net = Net(ns=ns, host_end=host_end, host_address=host_address, address=address)
    made[-1] = net
    inside = ["ip", "netns", "exec", ns, "ip"]
    for argv in (
        ["addr", "add", f"{address}/30", "dev", INSIDE],
        ["link", "set", INSIDE, "up"],
        ["link", "set", "lo", "up"],
    ):
        done = subprocess.run([*inside, *argv], capture_output=True, text=True, timeout=backstop(30))
        if done.returncode != 0:
            raise NetnsError(f"ip {' '.join(argv)} in {ns}: {done.stderr.strip()}")
    _ip("link", "set", host_end, "up")
    return net


def _remove(net: Net) -> None:
    """Whatever still runs in the namespace (only what the test started there) is killed, the pair deleted
    (both ends go with the host end), then the namespace."""
    pids = _ip("netns", "pids", net.ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("link", "del", net.host_end, check=False)
    _ip("netns", "del", net.ns, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove the namespaces (and what runs in them) of users of this rig whose process is gone: a suite
    killed before its cleanup leaves them. Returns their names."""
    swept = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        found = re.fullmatch(r"air-(\d+)-(\d+)", line.split(" ")[0])
        if found and not _alive(int(found.group(1))):
            _remove(Net(ns=found.group(0), host_end=f"a{found.group(1)}h{found.group(2)}", host_address="", address=""))
            swept.append(found.group(0))
    return swept


@contextmanager
def networks(count: int) -> Iterator[list[Net]]:
    """``count`` hosts, each in a namespace of its own; all of them removed on exit, whatever happens (and
    first, what killed users left)."""
    sweep_stale()
    made: list[Net] = []
    try:
        for _ in range(count):
            _make(made)
        yield list(made)
    finally:
        for net in made:
            _remove(net)
