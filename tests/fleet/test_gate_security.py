"""An env node's port, reached by a peer without the run's key: refused at the handshake, and nothing is run
or read for it (the env server never sees a request). Only the run's client key gets an answer."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgpack
import zmq
import zmq.asyncio

from air.fleet import wire
from rigs.fleet import Processes, make_folder, node_command, remove_private, wait_for
from rigs.patience import backstop


async def _ask(address: str, setup, method: bytes = b"run", timeout: float = 2.0) -> list[bytes] | None:
    """One request from a fresh DEALER set up by ``setup``; its reply frames, or None when nothing came."""
    ctx = zmq.asyncio.Context()
    socket = ctx.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    setup(socket)
    socket.connect(address)
    body = {"task_data": {"seconds": 0.0, "who": "stranger"}}
    try:
        await socket.send_multipart([b"req-1", method, msgpack.packb(body)])
        if await socket.poll(timeout * 1000):
            return await socket.recv_multipart()
        return None
    finally:
        socket.close(0)
        ctx.term()


def test_only_the_runs_key_gets_past_a_nodes_gate(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "fleet")
    processes = Processes(tmp_path / "logs")
    try:
        processes.start("n1", node_command(folder, "n1"), {"STUB_NAME": "n1"})
        record = wait_for(lambda: folder.records().get("n1"), backstop(60), "the node's record")
        client, node = folder.key_pair("client"), folder.key_pair("node")
        stranger_public, stranger_secret = zmq.curve_keypair()

        def plain(socket) -> None:  # no security at all
            pass

        def wrong_key(socket) -> None:  # CURVE, the node's public key known, but a key pair of its own
            wire.curve_client(socket, stranger_public, stranger_secret, node.public)

        def run_key(socket) -> None:
            wire.curve_client(socket, client.public, client.secret, node.public)

        async def probe():
            return (
                await _ask(record.address, plain),
                await _ask(record.address, wrong_key),
                await _ask(record.address, wrong_key, wire.STATUS),
                await _ask(record.address, run_key, timeout=10),
            )

        unkeyed, wrong, wrong_status, keyed = asyncio.run(probe())
    finally:
        processes.stop_all()
        remove_private(folder)
    assert unkeyed is None and wrong is None and wrong_status is None, "a peer without the key got an answer"
    assert keyed is not None and keyed[0] == b"req-1", keyed  # its run started (a delta or the reply)
    runs = re.findall(r"^run ", (folder.logs("n1") / "env-server.log").read_text(), re.M)
    assert len(runs) == 1, "only the keyed peer's request reached the env server"


def test_the_keys_are_owner_only_and_a_readable_one_is_refused(tmp_path: Path) -> None:
    import pytest

    from air.fleet.errors import FleetError

    folder = make_folder(tmp_path / "fleet")
    for name in ("client", "node"):
        assert (folder.keys / f"{name}.key").stat().st_mode & 0o077 == 0
    assert folder.keys.stat().st_mode & 0o077 == 0
    (folder.keys / "client.key").chmod(0o644)
    with pytest.raises(FleetError, match=r"client.key is readable by others \(mode 644\)"):
        folder.key_pair("client")
    before = (folder.keys / "node.key").read_text()
    folder.create({"taskset": {"id": "stub"}})  # a second init keeps the keys nodes already hold
    assert (folder.keys / "node.key").read_text() == before


def test_air_check_says_how_each_node_and_spreader_is_exposed(tmp_path: Path, capsys) -> None:
    from air.cli.main import build_parser, main
    from air.fleet.exposure import fleet_rows
    from rigs.fleet import fleet

    with fleet(tmp_path, 1) as (folder, _processes, _address):
        rows = {row.check: row for row in fleet_rows(str(folder.root))}
        assert main(["fleet", "status", str(folder.root)]) == 0
        status = capsys.readouterr().out
        folder.keys.chmod(0o755)
        opened = {row.check: row for row in fleet_rows(str(folder.root))}
    assert rows["fleet keys"].status == "pass" and opened["fleet keys"].status == "warn"
    node = rows["env node n1"]
    assert node.status == "pass" and "the run's key only (a keyless peer got no answer)" in node.detail, node
    assert rows["spreader train"].status == "pass" and "loopback only" in rows["spreader train"].detail
    assert "1 env nodes recorded" in status and re.search(r"n1: up, 0 running, 0 done, 0 failed", status), status
    assert build_parser().parse_args(["check", "--fleet", str(folder.root)]).fleet == str(folder.root)
