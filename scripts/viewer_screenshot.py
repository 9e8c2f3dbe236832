"""Regenerate the README's screenshot of the trajectory viewer from a real run in a real browser.

    uv run python scripts/viewer_screenshot.py [--out docs/images/viewer-overview.png] [--run-dir DIR]

1. run: unless --run-dir is given, a short real `air standalone` (4 steps x 8 rollouts of the built-in
   task, in Docker) into a temporary outputs folder, as `outputs/standalone/<time>-<id>/` (a few minutes
   on a 2-core machine);
2. serve: `air view` on that outputs folder (or DIR), on a free loopback port, as a user would;
3. open: headless Chromium (Debian's, or $AIR_CHROMIUM) driven by Playwright at a fixed viewport, waiting
   until Streamlit has settled;
4. save: the top of the overview (the viewport, 1500 x 1100 by default, ending above a row of charts its
   bottom edge would cut) as a PNG, kept under 400 KB.

One progress line per phase; exit 0 when the image is saved, else 1 with one line saying what is
missing (Docker, the sandbox image, Chromium, Playwright) or what failed. Uses nothing from tests/.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's air, however the script is started

from air.viewer.local_server import ViewerServerError, chromium_path, free_port, serving  # noqa: E402

DEFAULT_OUT = REPO / "docs" / "images" / "viewer-overview.png"
AIR = [sys.executable, "-m", "air.run_training"]  # the `air` command line of this environment
MAX_BYTES = 400_000
TIMEOUT_MS = 120_000


class ScreenshotError(Exception):
    """What stops the screenshot, said in one line."""


def progress(message: str) -> None:
    print(f"viewer_screenshot: {message}", flush=True)


def find_chromium() -> str:
    """$AIR_CHROMIUM, else the first Chromium on PATH (``air.viewer.local_server.chromium_path``)."""
    found = chromium_path()
    if found is not None:
        return found
    explicit = os.environ.get("AIR_CHROMIUM")
    if explicit:
        raise ScreenshotError(f"AIR_CHROMIUM={explicit} is not a file (point it at a Chromium binary)")
    raise ScreenshotError("no Chromium found: apt-get install chromium (or set AIR_CHROMIUM to a Chromium binary)")


def require_playwright() -> None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        raise ScreenshotError(f"Playwright is missing ({exc}): run `uv sync`, then use `uv run python ...`") from None


def require_docker() -> None:
    """The engine answers and the sandbox image is there (what `air standalone` needs)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001  (any failure to reach the engine says the same)
        raise ScreenshotError(
            f"no Docker engine answers ({type(exc).__name__}): start one (bash scripts/setup.sh), or pass --run-dir DIR"
        ) from None
    from air.sandbox.config import SandboxConfig

    image = SandboxConfig().resolved_image()
    try:
        client.images.get(image)
    except Exception:  # noqa: BLE001
        raise ScreenshotError(f"sandbox image {image} is missing: build it with uv run air build-image") from None


def run_standalone(workdir: Path, steps: int, batch_size: int) -> Path:
    """A real `air standalone` started in ``workdir``, so its run lands in workdir/outputs/standalone/<time>-<id>/."""
    command = [*AIR, "standalone", "--steps", str(steps), "--batch-size", str(batch_size)]
    process = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "100"},
    )  # fmt: skip
    tail: list[str] = []
    run_folder: Path | None = None
    assert process.stdout is not None
    for line in process.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        if found := re.match(r"run folder: (.+)", line):
            run_folder = Path(found.group(1).strip())
        if line.startswith(("run folder:", "step ")) or "rollouts in" in line:
            print(f"    {line}", flush=True)
    status = process.wait()
    if status != 0:
        detail = " | ".join(line for line in tail[-3:] if line.strip())
        raise ScreenshotError(f"air standalone exited with {status}: {detail}")
    runs = sorted((workdir / "outputs" / "standalone").glob("*/summary.json"))
    if run_folder is None and runs:
        run_folder = runs[-1].parent
    if run_folder is None or not (run_folder / "trajectories").is_dir():
        raise ScreenshotError(f"air standalone wrote no run folder under {workdir / 'outputs' / 'standalone'}")
    return run_folder


@contextlib.contextmanager
def air_view(directory: Path, timeout_s: float = 180.0) -> Iterator[str]:
    """`air view DIR` on a free loopback port; yields its URL once it answers and has indexed DIR."""
    port = free_port()
    command = [*AIR, "view", str(directory), "--port", str(port)]
    try:
        with serving(
            command, port, "air view", ready=lambda output: "air view: " in output, timeout_s=timeout_s, cwd=REPO
        ) as url:
            yield url
    except ViewerServerError as exc:
        raise ScreenshotError(str(exc).splitlines()[0]) from None


def _settled(page) -> None:
    """Wait until Streamlit's script run is over: no element left over from before it, no running widget."""
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')")
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden")


# The image ends above the first row of charts (or table) that the viewport's bottom edge would cut through.
CUT_ABOVE_A_CUT_ROW = """height => {
    let cut = height;
    for (const el of document.querySelectorAll(
            '[data-testid="stMain"] [data-testid="stHorizontalBlock"], [data-testid="stVegaLiteChart"], '
            + '[data-testid="stDataFrame"]')) {
        const box = el.getBoundingClientRect();
        if (box.top < height && box.bottom > height) cut = Math.min(cut, Math.floor(box.top) - 8);
    }
    return cut;
}"""


def _still_image(page, width: int, height: int, tries: int = 40) -> bytes:
    """The viewport once it stops changing: two shots in a row alike (charts draw after the page settles),
    cut above a row of charts its bottom edge would cut through."""
    cut = page.evaluate(CUT_ABOVE_A_CUT_ROW, height)
    clip = {"x": 0, "y": 0, "width": width, "height": cut if cut >= height // 2 else height}
    previous = page.screenshot(clip=clip)
    for _ in range(tries):
        page.wait_for_timeout(400)
        current = page.screenshot(clip=clip)
        if current == previous:
            return current
        previous = current
    raise ScreenshotError(f"the page kept changing for {tries} shots; nothing saved")


def take_screenshot(url: str, chromium: str, out: Path, width: int, height: int) -> None:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(url)
                main = page.locator('[data-testid="stMain"]')
                main.get_by_text("rollouts shown").wait_for()
                main.locator('[data-testid="stVegaLiteChart"]').first.wait_for()
                _settled(page)
                # every chart in view has drawn (Vega draws after the element appears)
                page.wait_for_function(
                    """() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
                        .filter(c => c.getBoundingClientRect().top < window.innerHeight)
                        .every(c => c.querySelector('canvas, svg'))"""
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(_still_image(page, width, height))
            finally:
                browser.close()
    except PlaywrightError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScreenshotError(f"the browser failed: {first}") from None


def shrink(out: Path) -> None:
    """Keep the PNG small: a UI screenshot loses nothing visible in a 256-colour palette."""
    if out.stat().st_size <= MAX_BYTES:
        return
    from PIL import Image

    with Image.open(out) as image:
        quantized = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    quantized.save(out, optimize=True)
    if out.stat().st_size > MAX_BYTES:
        raise ScreenshotError(f"{out} is {out.stat().st_size:,} bytes even as a palette PNG (limit {MAX_BYTES:,})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="viewer_screenshot.py",
        description="Regenerate the viewer screenshot from a real `air standalone` run in headless Chromium.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write (default: %(default)s)")
    parser.add_argument(
        "--run-dir", type=Path, help="show this folder of runs instead of running `air standalone` (no Docker needed)"
    )
    parser.add_argument("--steps", type=int, default=4, help="steps of the run (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="rollouts per step (default: %(default)s)")
    parser.add_argument("--width", type=int, default=1500, help="viewport width in px (default: %(default)s)")
    parser.add_argument("--height", type=int, default=1100, help="viewport height, the image's (default: %(default)s)")
    parser.add_argument("--keep-run", action="store_true", help="keep the temporary outputs folder and print it")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out = args.out.resolve()
    try:
        progress("[1/4] checking Playwright, Chromium" + ("" if args.run_dir else ", Docker and the sandbox image"))
        require_playwright()
        chromium = find_chromium()
        if args.run_dir is not None:
            if not args.run_dir.is_dir():
                raise ScreenshotError(f"--run-dir {args.run_dir}: no such folder")
            folder = args.run_dir.resolve()
            workdir = None
            progress(f"[2/4] using the runs in {folder} (no new run)")
        else:
            require_docker()
            workdir = Path(tempfile.mkdtemp(prefix="air-screenshot-"))
            progress(f"[2/4] running air standalone --steps {args.steps} --batch-size {args.batch_size} in {workdir}")
            run_started = time.monotonic()
            run_folder = run_standalone(workdir, args.steps, args.batch_size)
            progress(f"      run done in {time.monotonic() - run_started:.0f} s: {run_folder}")
            folder = workdir / "outputs" / "standalone"  # what `air view outputs/standalone` shows
        try:
            progress(f"[3/4] starting air view {folder} on a free loopback port")
            with air_view(folder) as url:
                progress(f"[4/4] opening {url} in headless Chromium ({args.width}x{args.height}) and saving {out}")
                take_screenshot(url, chromium, out, args.width, args.height)
            shrink(out)
        finally:
            if workdir is not None:
                if args.keep_run:
                    progress(f"kept the run's outputs in {workdir}")
                else:
                    shutil.rmtree(workdir, ignore_errors=True)
    except ScreenshotError as exc:
        print(f"viewer_screenshot: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("viewer_screenshot: interrupted", file=sys.stderr)
        return 130
    progress(f"saved {out} ({out.stat().st_size:,} bytes) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
