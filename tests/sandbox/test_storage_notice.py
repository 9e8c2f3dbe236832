"""The "no disk quota" notice: one short warning the first time a Docker engine is used (remembered per
engine ID across processes, in the user's cache), the whole story at INFO every time (a run's run.log)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import docker
import pytest

from air.runs.run_log import log_file
from air.sandbox.storage import can_size, storage_driver
from rigs.patience import backstop

# A program that logs as a plain script does (INFO and up to stderr) and asks the engine for its driver.
ASK = (
    "import logging, docker; logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
    "from air.sandbox.storage import storage_driver; storage_driver(docker.from_env())\n"
)


@pytest.fixture
def unsized_engine(docker_image: str) -> docker.DockerClient:
    client = docker.from_env()
    info = client.info()
    driver = info["Driver"] + (
        f" on {b}" if (b := dict(info.get("DriverStatus") or []).get("Backing Filesystem")) else ""
    )
    if can_size(driver):
        pytest.skip(f"this engine ({driver}) sizes containers: there is no notice to give")
    return client


def test_the_marker_lives_in_the_users_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from air.sandbox.storage import notice_marker

    monkeypatch.delenv("AIR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert notice_marker("AB:CD/EF") == tmp_path / "xdg" / "air" / "engines" / "AB_CD_EF.no-disk-quota"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert notice_marker("X") == tmp_path / "home" / ".cache" / "air" / "engines" / "X.no-disk-quota"
    monkeypatch.setenv("AIR_CACHE_DIR", str(tmp_path / "tests"))
    assert notice_marker("X") == tmp_path / "tests" / "engines" / "X.no-disk-quota"


def test_the_warning_points_at_a_heading_that_says_how_to_get_a_quota(caplog: pytest.LogCaptureFixture) -> None:
    import re

    from air.sandbox.storage import _say_no_quota
    from tests.test_readme_quickstart import ROOT, anchors

    with caplog.at_level("WARNING", logger="air.sandbox.storage"):
        _say_no_quota("overlay2 on extfs", "")  # an engine without an ID: said every time, nothing remembered
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    pointer = re.search(r"said once per engine; (docs/[\w/.-]+\.md)#([\w-]+) says how to get one", warning)
    assert pointer, warning
    page, anchor = ROOT / pointer.group(1), pointer.group(2)
    assert page.is_file() and anchor in anchors(page), f"{pointer.group(0)}: no such page or heading"
    section = page.read_text().partition("\n## Disk quota\n")[2].partition("\n## ")[0]
    assert "pquota" in section and "--storage-driver btrfs" in section  # the way to a quota is there


def test_first_notice_is_true_once_per_engine(tmp_path: Path) -> None:
    from air.sandbox.storage import first_notice

    assert first_notice("engine-a") and not first_notice("engine-a") and first_notice("engine-b")
    assert first_notice("") and first_notice("")  # an engine without an ID: said every time


@pytest.mark.docker
def test_the_warning_is_one_line_once_per_engine_across_processes(
    unsized_engine: docker.DockerClient, air_cache_dir: Path
) -> None:
    runs = [
        subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True, timeout=backstop(120)) for _ in "ab"
    ]
    first, second = ([line for line in run.stderr.splitlines() if "quota" in line] for run in runs)
    (warning,) = [line for line in first if line.startswith("WARNING")]
    assert "no disk quota for sandboxes on this Docker engine" in warning and "said once per engine" in warning
    assert len(warning) < 200, "one short line"
    assert not [line for line in second if line.startswith("WARNING")], second
    for lines in (first, second):  # the whole story, at INFO, each time
        (detail,) = [line for line in lines if line.startswith("INFO")]
        assert (
            "Each file the agent writes is still capped" in detail
            and "For a quota, `sudo bash scripts/engine_quota" in detail
        )
    from air.sandbox.storage import notice_marker

    engine_id = unsized_engine.info()["ID"]
    assert notice_marker(engine_id).is_file() and notice_marker(engine_id).is_relative_to(air_cache_dir)


@pytest.mark.docker
def test_a_runs_log_file_gets_the_detail(unsized_engine: docker.DockerClient, tmp_path: Path) -> None:
    from air.sandbox.storage import first_notice

    first_notice(unsized_engine.info()["ID"])  # told before: this run says it only in its log
    with log_file(tmp_path / "run.log"):
        storage_driver(docker.from_env())  # a new client asks again
    text = (tmp_path / "run.log").read_text()
    assert "INFO air.sandbox.storage: no disk quota for sandbox containers" in text and "For a quota" in text
    assert "WARNING" not in text
