"""``air check --fleet DIR``: how each env node and spreader of a fleet is exposed and protected, asked live.

Per node: its address, whether the run's key gets an answer (it is up), and whether a peer without the key
gets one (it must not: the gate's CURVE handshake refuses it). Per spreader: its address, which must be
loopback (the orchestrator's hop carries no key). And the keys themselves: owner-only.
"""

from __future__ import annotations

import asyncio
import stat

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder, KeyPair
from air.fleet.probe import ask_status
from air.launch.config_v1 import beyond_loopback
from air.launch.preflight_rows import CheckRow

PROBE_S = 2.0


def fleet_rows(root: str) -> list[CheckRow]:
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
    for name, record in records.items():
        keyed, keyless = asyncio.run(_both(record.address, keys))
        if keyless is not None:
            rows.append(CheckRow(f"env node {name}", "fail", f"{record.address} answers a peer without the key"))
        elif keyed is None:
            rows.append(CheckRow(f"env node {name}", "warn", f"{record.address}: recorded, does not answer (lost?)"))
        else:
            detail = f"{record.address}: CURVE, the run's key only (a keyless peer got no answer);"
            detail += f" {keyed.get('running')} running, {keyed.get('containers')} containers"
            rows.append(CheckRow(f"env node {name}", "pass", detail))
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


async def _both(address: str, keys: tuple[KeyPair, bytes]) -> tuple[dict | None, dict | None]:
    return await ask_status(address, keys, PROBE_S), await ask_status(address, None, PROBE_S)
