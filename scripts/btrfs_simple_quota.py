"""Turns on btrfs simple quotas (squota, Linux 6.7+) on a mounted btrfs, before dockerd's btrfs driver uses it.

    python3 scripts/btrfs_simple_quota.py MOUNTPOINT     # exit 0: on (or already on); 1: refused, and why

Why: dockerd's btrfs driver sizes each container with a quota group, and with full quotas (what it turns on
itself) removing a container marks the quota data inconsistent on recent kernels (dmesg: "qgroup marked
inconsistent, to be deleted qgroup ... has non-zero numbers": moby deletes the group before the subvolume), after
which no write is counted: 2 GiB went into a container limited to 1 GiB, on Linux 6.18. Simple quotas count each
extent against the subvolume that wrote it and stay consistent, and the image's files no longer count against a
container's limit. btrfs-progs before 6.7 cannot ask for them (``btrfs quota enable --simple``): the ioctl can.
"""

import errno
import fcntl
import os
import struct
import sys

QUOTA_CTL = 0xC0109428  # _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args {u64 cmd; u64 status})
ENABLE_SIMPLE_QUOTA = 4

if len(sys.argv) != 2:
    sys.exit(f"usage: python3 {sys.argv[0]} MOUNTPOINT")
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, QUOTA_CTL, bytearray(struct.pack("QQ", ENABLE_SIMPLE_QUOTA, 0)))
except OSError as exc:
    why = "this kernel's btrfs has no simple quotas (Linux 6.7+)" if exc.errno == errno.EINVAL else exc.strerror
    sys.exit(f"cannot turn on btrfs simple quotas on {sys.argv[1]}: {why}")
finally:
    os.close(fd)
