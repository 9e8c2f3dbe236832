"""``air check --fleet DIR``: how each env node and spreader of a fleet is exposed and protected, asked live.

Per node: its address, whether the run's key gets an answer (it is up), and whether a peer without the key
gets one (it must not: the gate's CURVE handshake refuses it). Per spreader: its address, which must be
loopback (the orchestrator's hop carries no key). And the keys themselves: owner-only.

Every node is asked at once, each in a thread of its own, and each says a line when it is asked and when it
is done. A node's check is bounded: one that has not finished within NODE_BOUND_S (a gate that accepts and
stays silent is caught sooner, by the probes' own wait; a host name that never resolves holds ZMQ's I/O
thread longer) is reported as not answering and left behind, never waited on.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import stat
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder, KeyPair, NodeRecord
from air.fleet.probe import ask_status
from air.launch.config_v1 import beyond_loopback
from air.launch.preflight_rows import CheckRow

PROBE_S = 5.0  # each question's wait: a gate answers in milliseconds, one on a loaded host in a second or two
NODE_BOUND_S = 3 * PROBE_S  # a node's whole check; past it the node is reported, not waited on


def fleet_rows(root: str, say: Callable[[str], None] = lambda line: None) -> list[CheckRow]:
    """The fleet's rows; ``say(line)`` as each node is asked and as each is done (progress to show)."""
    folder = FleetFolder(root)
    try:
        keys = (folder.key_pair("client"), folder.key_pair("node").public)
    except FleetError as exc:
        return [CheckRow("fleet keys", "fail", str(exc), "air fleet init DIR makes them owner-only")]
    mode = stat.S_IMODE(folder.keys.stat().st_mode)
    rows = [
        CheckRow("fleet keys", "pass", f"{folder.keys}: owner-only ({mode:o}); a peer without them gets nothing")
        if not mode & 0o077
        else CheckRow("fleet keys", "warn", f"{folder.keys} is open to others ({mode:o})", f"chmod 700 {folder.keys}")
    ]
    records = folder.records()
    if not records:
        rows.append(CheckRow("env nodes", "warn", f"none recorded in {folder.nodes}", "air fleet submit DIR --nodes 4"))
    rows += node_rows(folder, records, keys, say)
    for figures in folder.all_figures():
        address = str(figures.get("address", ""))
        exposed = beyond_loopback(address)
        rows.append(
            CheckRow(
                f"spreader {figures.get('source')}",
                "warn" if exposed else "pass",
                f"{address}: " + ("reachable beyond this host, without a key" if exposed else "loopback only"),
                "bind the spreader to 127.0.0.1 (air fleet overlay does)" if exposed else "",
            )
        )
    return rows


def node_rows(
    folder: FleetFolder, records: dict[str, NodeRecord], keys: tuple[KeyPair, bytes], say: Callable[[str], None]
) -> list[CheckRow]:
    """One row per node, asked side by side; a node still unanswered at the bound is reported as such."""
    done: queue.Queue[tuple[str, CheckRow]] = queue.Queue()
    started = time.monotonic()
    for name, record in records.items():
        say(f"env node {name}: asking {record.address} (with the run's key and without; {NODE_BOUND_S:.0f} s at most)")
        # A daemon thread: one stuck in C (a resolver, a ZMQ context's end) is left behind, not joined at exit.
        threading.Thread(
            target=lambda n=name, r=record: done.put((n, _asked(n, r, keys, folder))),
            name=f"check-{name}",
            daemon=True,
        ).start()
    found: dict[str, CheckRow] = {}
    deadline = started + NODE_BOUND_S
    while len(found) < len(records):
        try:
            name, row = done.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        found[name] = row
        say(f"env node {name}: {row.status} after {time.monotonic() - started:.1f} s")
    for name, record in records.items():
        if name not in found:
            found[name] = CheckRow(
                f"env node {name}",
                "warn",
                f"{record.address}: its check had not ended after {NODE_BOUND_S:.0f} s and was left behind"
                " (a host name that does not resolve, or a gate that is stuck)",
            )
            say(f"env node {name}: no answer within {NODE_BOUND_S:.0f} s, not waited on")
    return [found[name] for name in records]


def _asked(name: str, record: NodeRecord, keys: tuple[KeyPair, bytes], folder: FleetFolder) -> CheckRow:
    try:
        return _node_row(name, record, keys, folder)
    except Exception as exc:  # an address ZMQ refuses, say: this node's row, never a thread dead in silence
        return CheckRow(f"env node {name}", "fail", f"{record.address}: cannot be asked: {exc!r}")


def _node_row(name: str, record: NodeRecord, keys: tuple[KeyPair, bytes], folder: FleetFolder) -> CheckRow:
    keyed, keyless = asyncio.run(_both(record.address, keys))
    if keyless is not None:
        return CheckRow(f"env node {name}", "fail", f"{record.address} answers a peer without the key")
    if keyed is not None:
        detail = f"{record.address}: CURVE, the run's key only (a keyless peer got no answer);"
        detail += f" {keyed.get('running')} running, {keyed.get('containers')} containers"
        return CheckRow(f"env node {name}", "pass", detail)
    listening = _accepts(record.address)
    if listening is True:
        detail = f"{record.address}: accepts connections but its gate did not answer within {PROBE_S:.0f} s: stuck"
        return CheckRow(f"env node {name}", "warn", detail + " (a paused or overloaded process?)")
    if listening is False:
        detail = f"{record.address}: nothing listens there (the node is gone)"
        fix = f"a node killed with SIGKILL leaves its record: delete {folder.record_path(record.name)}"
        return CheckRow(f"env node {name}", "warn", detail, fix)
    return CheckRow(f"env node {name}", "warn", f"{record.address}: recorded, does not answer (lost?)")


async def _both(address: str, keys: tuple[KeyPair, bytes]) -> tuple[dict | None, dict | None]:
    keyed, keyless = await asyncio.gather(ask_status(address, keys, PROBE_S), ask_status(address, None, PROBE_S))
    return keyed, keyless


def _accepts(address: str) -> bool | None:
    """Whether a TCP connection to a ``tcp://host:port`` is accepted; None when that cannot be told."""
    parts = urlsplit(address)
    if parts.scheme != "tcp" or not parts.hostname or parts.port is None:
        return None
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=PROBE_S):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return None
