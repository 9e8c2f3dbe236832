"""Benchmark: the README's first command, as a new user meets it: a fresh clone, `bash scripts/setup.sh`, then
`uv run air standalone`; how long each part takes and how much set-up installs.

    python3 benchmarks/first_screen.py [--cold-cache] [--image] [--base] [--json] [--keep]

- A fresh clone of this checkout's HEAD in a temporary folder (nothing of this checkout's .venv or outputs).
- set-up: `bash scripts/setup.sh` there, its total and its sections (uv sync, sandbox image) as it prints them.
  System packages, dockerd and the sandbox image are this machine's: where the image exists, set-up only checks.
- --cold-cache: uv's cache in a new empty folder, so every wheel comes from PyPI as on a new machine (else the
  user's cache: a second clone, or CI with a warm cache).
- --image: also time the sandbox image's build from its recipe without Docker's cache, to a throwaway tag
  (removed after), as set-up builds it on a machine without it; --base: and the Debian base's debootstrap
  before it (re-imports air-debian-base:bookworm, which the image builds FROM on a machine without a registry).
- main job: `uv run air standalone` in the clone, as the README says (10 steps of 8 rollouts).
- sizes: the clone's .venv after set-up (and what its largest parts are), uv's cache folder when cold, the image.
- load: the 1-minute load average before and after each part (the machine is shared; say so with the figures).
Needs what set-up needs (root or sudo where packages are missing, a Docker engine, the PyPI registry).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTION = re.compile(r"^\s{4}(?P<name>[^:]+): (?P<value>[\d.]+)s$")  # setup.sh's "    uv sync: 12.3s"


def load() -> float:
    return os.getloadavg()[0]


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def largest_parts(site_packages: Path, count: int = 8) -> list[tuple[str, int]]:
    sizes = [(entry.name, du_bytes(entry)) for entry in site_packages.iterdir() if entry.is_dir()]
    return sorted(sizes, key=lambda pair: -pair[1])[:count]


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, str, float, float]:
    """(seconds, output, load before, load after); the output also goes to ``log``."""
    before = load()
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    log.write_text(output)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {result.returncode}); its output: {log}\n{output[-3000:]}")
    return seconds, output, before, load()


def sections(output: str) -> dict[str, float]:
    found = {}
    for line in output.splitlines():
        match = SECTION.match(line)
        if match:
            found[match["name"]] = float(match["value"])
    return found


def image_build(clone: Path, env: dict[str, str], with_base: bool) -> dict[str, float | str]:
    """The sandbox image from its recipe, no cache, to a throwaway tag; and the base's debootstrap first."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(clone)!r})
from air.sandbox.image.base import ensure_debootstrap_base, get_client
from air.sandbox.image.build import run_build
from air.sandbox.image.recipe import build_context
from air.sandbox.image.progress import as_progress
from air.sandbox.image.recipe import recipe_hash
client = get_client()
out = {{}}
started = time.monotonic()
base = ensure_debootstrap_base(client, False, rebuild={with_base})
out["base_s"] = time.monotonic() - started
tag = "air-bench-first-screen:" + recipe_hash()
started = time.monotonic()
run_build(client, tag, build_context(None), {{"BASE_IMAGE": base}}, {{}}, True, as_progress(False))
out["image_s"] = time.monotonic() - started
out["image_bytes"] = client.images.get(tag).attrs["Size"]
client.images.remove(tag, noprune=False)
print(json.dumps(out))
"""
    python = clone / ".venv" / "bin" / "python"
    result = subprocess.run([str(python), "-c", code], cwd=clone, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the image build failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold-cache", action="store_true", help="uv's cache in a new empty folder")
    parser.add_argument("--image", action="store_true", help="also time the image's build without cache")
    parser.add_argument("--base", action="store_true", help="with --image: debootstrap the base again first")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="air-first-screen-"))
    clone = work / "air-agent"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIR_", "MLGYM_", "UV_PROJECT", "VIRTUAL_ENV"))}
    if args.cold_cache:
        env["UV_CACHE_DIR"] = str(work / "uv-cache")
    figures: dict[str, object] = {"cold_cache": args.cold_cache, "cores": os.cpu_count()}
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True)
        figures["commit"] = head.stdout.strip()

        seconds, output, before, after = timed(["bash", "scripts/setup.sh"], clone, env, work / "setup.log")
        figures["setup_s"] = round(seconds, 1)
        figures["setup_sections_s"] = {name: round(value, 1) for name, value in sections(output).items()}
        figures["setup_load"] = [round(before, 1), round(after, 1)]
        venv = clone / ".venv"
        figures["venv_bytes"] = du_bytes(venv)
        site = next((venv / "lib").glob("python3*/site-packages"))
        figures["venv_largest"] = largest_parts(site)
        if args.cold_cache:
            figures["uv_cache_bytes"] = du_bytes(work / "uv-cache")

        again, _, _, _ = timed(["bash", "scripts/setup.sh"], clone, env, work / "setup-again.log")
        figures["setup_again_s"] = round(again, 2)

        if args.image:
            figures.update(
                {k: round(v, 1) if isinstance(v, float) else v for k, v in image_build(clone, env, args.base).items()}
            )

        seconds, output, before, after = timed(["uv", "run", "air", "standalone"], clone, env, work / "main.log")
        figures["main_job_s"] = round(seconds, 1)
        figures["main_job_load"] = [round(before, 1), round(after, 1)]
        tail = [line for line in output.splitlines() if "rollouts in" in line]
        figures["main_job_says"] = tail[-1].strip() if tail else None
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}", file=sys.stderr)

    if args.json:
        print(json.dumps(figures))
        return 0
    gib = 1024**3
    print(f"commit {figures['commit']}, {figures['cores']} cores, uv cache {'cold' if args.cold_cache else 'warm'}")
    print(f"set-up: {figures['setup_s']} s {figures['setup_sections_s']} (load {figures['setup_load']})")
    print(f"set-up again: {figures['setup_again_s']} s")
    print(
        f".venv: {figures['venv_bytes'] / gib:.2f} GiB; largest: "
        + ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in figures["venv_largest"])
    )
    if "uv_cache_bytes" in figures:
        print(f"uv cache filled: {figures['uv_cache_bytes'] / gib:.2f} GiB")
    if "image_s" in figures:
        print(
            f"image without cache: {figures['image_s']} s ({figures['image_bytes'] / 2**20:.0f} MiB); "
            f"base: {figures['base_s']} s"
        )
    print(f"main job: {figures['main_job_s']} s (load {figures['main_job_load']}): {figures['main_job_says']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
