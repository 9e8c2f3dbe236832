"""Benchmark: how fast a folder of generated trajectories opens in the viewer, measured in a real
browser (headless Chromium, Debian's package, driven by Playwright).

    uv run python benchmarks/viewer.py [--rollouts 5000] [--repeats 3] [--json] [--pad-output 0]

For each way of starting the viewer, a fresh server and a fresh browser (empty cache), then:
- first_open_s: from navigation start until the overview is usable: headline numbers, the
  rollout table and every chart drawn. Target: < 3 s for 5,000 rollouts.
- reopen_s: the same page opened again in the same browser (its cache warm, the server's index
  already built).
Servers: "air view (warm)" is opened once `air view` has printed its ready line (the usual case:
the URL is opened after the command started); "air view (at once)" the moment the server answers;
"streamlit run" the plain `streamlit run air/visualize.py -- --trajectory_dir DIR`, which indexes
only when the first page arrives.
--pad-output N adds N characters to every command output (real outputs are longer than the
generated ones), to see how the file size moves the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright  # noqa: E402

from rigs.synthetic_runs import write_synthetic_run  # noqa: E402
from rigs.viewer_server import chromium_path, viewer_server  # noqa: E402

# Usable: the headline, the table's grid and every chart drawn, nothing left over from a previous run.
USABLE = """() => {
  const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
    .filter(chart => chart.querySelector('.marks')).length;
  const table = document.querySelector('[data-testid="stDataFrame"] canvas');
  const metric = [...document.querySelectorAll('[data-testid="stMetricLabel"]')]
    .some(label => label.innerText.includes('rollouts shown'));
  return metric && table && charts >= %d && !document.querySelector('[data-stale="true"]');
}"""
CHARTS = 6  # reward, improvement, score per task (one chart of panels), validates, format errors, zero advantage
CASES = [
    ("air view (warm)", "air view", True),
    ("air view (at once)", "air view", False),
    ("streamlit run", "streamlit run", False),
]


def generate(directory: Path, rollouts: int, pad: int) -> float:
    """The synthetic run of the tests (seed 0); returns the mean file size in bytes."""
    paths = write_synthetic_run(directory, rollouts, pad_output=pad)
    return sum(path.stat().st_size for path in paths) / rollouts


def open_page(page, url: str, charts: int) -> float:
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function(USABLE % charts, timeout=120_000, polling=25)
    return time.perf_counter() - started


def measure(directory: Path, via: str, warm: bool, chromium: str, charts: int) -> dict[str, float]:
    with viewer_server(directory, via=via, wait_warm=warm) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            first = open_page(page, url, charts)
            again = open_page(page, url, charts)
        finally:
            browser.close()
    return {"first_open_s": first, "reopen_s": again}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pad-output", type=int, default=0, help="characters added to every command output")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    chromium = chromium_path()
    if chromium is None:
        print("no Chromium: apt-get install chromium (or set AIR_CHROMIUM)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="air-viewer-bench-") as tmp:
        directory = Path(tmp) / "trajectories"
        started = time.perf_counter()
        mean_size = generate(directory, args.rollouts, args.pad_output)
        generated_s = time.perf_counter() - started
        results: dict[str, object] = {"rollouts": args.rollouts, "mean_file_kb": round(mean_size / 1024, 1)}
        results["generate_s"] = round(generated_s, 1)
        for name, via, warm in CASES:
            runs = [measure(directory, via, warm, chromium, CHARTS) for _ in range(args.repeats)]
            for key in ("first_open_s", "reopen_s"):
                values = [r[key] for r in runs]
                results[f"{name}: {key} median"] = round(statistics.median(values), 2)
                results[f"{name}: {key} max"] = round(max(values), 2)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:45s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
