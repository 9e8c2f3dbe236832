"""`air check`'s disk line names the quota route scripts/engine_quota.sh takes on this machine: xfs with project
quotas where the kernel's xfs has them, else btrfs with simple quotas (issue 50, item 2)."""

from __future__ import annotations

from pathlib import Path

from air.sandbox.storage import quota_route, quota_summary


def _kernel(tmp_path: Path, *paths: str) -> tuple[Path, Path]:
    for path in paths:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    return tmp_path / "proc", tmp_path / "sys"


def test_the_route_follows_what_the_kernel_has(tmp_path):
    assert quota_route(*_kernel(tmp_path / "a", "proc/fs/xfs/xqm", "proc/fs/xfs/stat")) == "xfs"
    # This machine's and CI's kernel: xfs without CONFIG_XFS_QUOTA, btrfs with simple quotas.
    no_xfs_quota = _kernel(tmp_path / "b", "proc/fs/xfs/stat", "sys/fs/btrfs/features/simple_quota")
    assert quota_route(*no_xfs_quota) == "btrfs"
    assert quota_route(*_kernel(tmp_path / "c", "sys/fs/btrfs/features/simple_quota")) == ""  # xfs not loaded
    assert quota_route(*_kernel(tmp_path / "d", "proc/fs/xfs/stat")) == ""  # neither has a quota


def test_the_disk_line_names_the_route():
    quota, said = quota_summary("overlay2 on extfs", "btrfs")
    assert not quota and said.endswith(
        "`sudo bash scripts/engine_quota.sh 200G` (here: btrfs with simple quotas, as this kernel's xfs has no quotas)"
    ), said
    assert quota_summary("overlay2 on extfs", "xfs")[1].endswith("(here: xfs with project quotas)")
    assert quota_summary("overlay2 on extfs", "")[1].endswith("engine_quota.sh 200G`")
    assert quota_summary("btrfs", "btrfs") == (
        True,
        "engine quota (btrfs): each container's writes stop at its disk limit",
    )
