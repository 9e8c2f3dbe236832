"""What a container takes on the host's disk, read from the host (root): the blocks of its upper folder
(``GraphDriver.Data.UpperDir``, st_blocks, hard links once, as ``du`` counts) and, where asked, of the files its
processes hold open after deleting them. For the disk tests on overlay2 engines."""

from __future__ import annotations

import os
import subprocess

from docker.models.containers import Container


def container_bytes(container: Container, *, held: bool = True) -> int:
    container.reload()
    upper = container.attrs["GraphDriver"]["Data"]["UpperDir"]
    du = subprocess.run(["du", "-s", "--block-size=1", upper], capture_output=True, text=True, check=True)
    total = int(du.stdout.split()[0])
    if not held:
        return total
    for row in container.top(ps_args="-eo pid")["Processes"]:
        folder = f"/proc/{row[0]}/fd"
        for fd in os.listdir(folder) if os.path.isdir(folder) else []:
            try:
                if os.readlink(f"{folder}/{fd}").endswith(" (deleted)"):
                    total += os.stat(f"{folder}/{fd}").st_blocks * 512
            except OSError:
                continue
    return total
