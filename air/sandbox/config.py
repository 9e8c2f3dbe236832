"""How sandbox containers are made (typed settings) and the labels that mark what we own."""

from __future__ import annotations

import os
import re
import socket
from typing import Annotated, Literal

import psutil
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

LABEL = "air.managed"
LABEL_RUN = "air.run"
LABEL_HOST = "air.owner.host"
LABEL_PID = "air.owner.pid"
LABEL_STARTED = "air.owner.started"

WORKSPACE = "/home/agent/workspace"
# A size as docker and tmpfs both read it: a whole number of bytes, k, m, g or t (512m, 4g).
SIZE = re.compile(r"[1-9][0-9]*[kmgt]?", re.IGNORECASE)


def checked_size(value: str, name: str, *, none_ok: bool = False) -> str:
    """``value`` as a size docker and tmpfs both read (lower case), or a ValueError naming setting ``name``;
    '' passes where ``none_ok`` (no limit)."""
    if none_ok and value == "":
        return value
    if not SIZE.fullmatch(value.strip()):
        raise ValueError(f"{name} must be a whole size like '512m' or '4g', got {value!r}")
    return value.strip().lower()


SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}  # binary, as docker and tmpfs read them


def size_bytes(size: str) -> int:
    """A size as ``checked_size`` admits it ("4g") in bytes; '' (no limit) is 0."""
    value = size.strip().lower()
    if not value:
        return 0
    unit = value[-1] if value[-1:].isalpha() else ""
    return int(value.removesuffix(unit)) * SIZE_UNITS[unit]


def _size(value: str, info: ValidationInfo) -> str:
    return checked_size(value, str(info.field_name))


def _size_or_none(value: str, info: ValidationInfo) -> str:
    return checked_size(value, str(info.field_name), none_ok=True)


# Size settings, checked where they are declared: a model that takes a SandboxConfig field over (the env's
# ``container_*`` arguments) takes its check with it, the error naming its own key.
Size = Annotated[str, AfterValidator(_size)]
SizeOrNone = Annotated[str, AfterValidator(_size_or_none)]  # '' is no limit


# Files in a tmpfs cost kernel memory that no kill frees, bytes or not (an empty file: 0.9 KiB measured, 1.5 KiB
# with a 255-byte name; a hard link counts as one more file, and extended attributes draw on the same allowance:
# 2.0 KiB of memory per file allowed at worst, 217-byte values). Each of /tmp and /dev/shm may hold one file per
# INODE_BYTES of its size, at least MIN_INODES (pip's and torch's caches, sockets), so its files cost at most
# INODE_KERNEL_BYTES / INODE_BYTES (3/16) of its size on top of it.
INODE_BYTES = 16 << 10
MIN_INODES = 4096
INODE_KERNEL_BYTES = 3 << 10  # the budget's cost of one file, above the 2.0 KiB measured
# What the container must keep free with /tmp and /dev/shm full: a new shell for the agent, and root's exec.
SHELL_ROOM = 64 << 20


def tmpfs_inodes(size: int) -> int:
    """The most files (nr_inodes) a tmpfs of ``size`` bytes may hold."""
    return max(MIN_INODES, size // INODE_BYTES)


def _held(size: int) -> int:
    """What a tmpfs of ``size`` bytes may hold in memory, full: its bytes and the kernel memory of its files."""
    return size + tmpfs_inodes(size) * INODE_KERNEL_BYTES


def _mib(count: int, *, up: bool) -> str:
    return f"{(count + ((1 << 20) - 1 if up else 0)) >> 20}m"


def memory_budget_problem(memory: str, tmp: str, shm: str, keys: tuple[str, str, str]) -> str | None:
    """None when /tmp (``tmp``) and /dev/shm (``shm``), full of bytes and files, leave a new shell and root's exec
    room below ``memory``; else one line naming ``keys`` (memory's, tmp's, shm's) and what would fit. Memory
    full of what no kill frees once masked a rollout."""
    limit, need = size_bytes(memory), _held(size_bytes(tmp)) + _held(size_bytes(shm)) + SHELL_ROOM
    if need <= limit:
        return None
    memory_key, tmp_key, shm_key = keys
    room = limit - _held(size_bytes(shm)) - SHELL_ROOM  # for /tmp, with /dev/shm as it is
    most_tmp = room * INODE_BYTES // (INODE_BYTES + INODE_KERNEL_BYTES)
    if tmpfs_inodes(most_tmp) > most_tmp // INODE_BYTES:  # under the floor: its files cost a fixed amount
        most_tmp = room - MIN_INODES * INODE_KERNEL_BYTES
    lower = f" or lower {tmp_key} to {_mib(most_tmp, up=False)}" if most_tmp >= 1 << 20 else ""
    return (
        f"{tmp_key} ({tmp}) plus {shm_key} ({shm}), with the kernel memory of their files and room for a new "
        f"shell and root's exec ({_mib(SHELL_ROOM, up=True)}), need {_mib(need, up=True)} of {memory_key} "
        f"({memory}): raise {memory_key} to {_mib(need, up=True)}{lower}"
    )


def parse_env_gpu(env_gpu: str | None) -> list[str]:
    """``"7"`` or ``"6,7"`` -> device ids; ``None``/``""`` -> no GPU."""
    if env_gpu is None or str(env_gpu).strip() == "":
        return []
    ids = [part.strip() for part in str(env_gpu).split(",")]
    if not all(i.isdigit() for i in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"env_gpu must be GPU indices like '7' or '6,7', got {env_gpu!r}")
    return ids


class SandboxConfig(BaseModel):
    """How sandbox containers are made."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(default="", description="Image to run; empty: $AIR_IMAGE, else the recipe's current tag.")
    user: str = Field(default="agent", description="User the agent's shell runs as.")
    workdir: str = Field(default=WORKSPACE, description="The agent's starting directory.")
    cpus: float = Field(default=2.0, gt=0, description="CPU limit per container (cores).")
    memory: Size = Field(default="4g", description="Memory limit per container (docker syntax), swap disabled.")
    pids_limit: int = Field(default=1024, gt=16, description="Most processes (threads) in a container.")
    disk: SizeOrNone = Field(
        default="20g",
        description="Most bytes a container may write: the engine's quota where its storage driver can size "
        "containers (overlay2 on xfs with pquota, btrfs, zfs); elsewhere a file system of its own for its writable "
        "layer (disk_layer), or, where the host cannot, its writable size checked every few seconds (disk_check_s) "
        "and, past it, the agent's writers killed and its commands failed; '' for no limit.",
    )
    disk_layer: Literal["auto", "loop", "watch"] = Field(
        default="auto",
        description="Where the engine cannot size a container (overlay2 on ext4): 'loop' puts its writable layer on "
        "an ext4 file system of its own, `disk` in size (a sparse file, loop-mounted: needs this process as root on "
        "the engine's host, loop devices, mkfs.ext4), so the kernel stops any write past it; 'watch' checks its "
        "size every few seconds instead (disk_check_s; a file held only by a descriptor in flight or a mapping "
        "escapes it); 'auto': 'loop' where the host can, else the watch (said once).",
    )
    disk_check_s: float = Field(
        default=10.0,
        gt=0,
        description="Where the engine cannot size a container: the longest wait between two checks of what it has "
        "written against `disk` (sooner as the limit nears).",
    )
    max_file_size: SizeOrNone = Field(
        default="4g",
        description="Largest file the agent may write (a hard RLIMIT_FSIZE on its shell and the evaluation's "
        "agent-side processes, on every engine); '' for no limit.",
    )
    tmp_size: Size = Field(
        default="1g",
        description="Size of a container's /tmp (tmpfs, counts as memory; one file per 16 KiB of it, at least 4096).",
    )
    shm_size: Size = Field(
        default="256m",
        description="Size of a container's /dev/shm (tmpfs, counts as memory; one file per 16 KiB of it, at least "
        "4096). With /tmp, and their files' kernel memory (3/16 of their size), it must leave 64m of `memory` free.",
    )
    network: bool = Field(default=False, description="Give the container a network (off by default).")
    env_gpu: str | None = Field(default=None, description="GPUs for the container: '7' or '6,7'.")
    ttl_s: int = Field(default=12 * 3600, gt=0, description="Dead-man switch: container lifetime.")
    max_output_bytes: int = Field(default=256 * 1024, ge=1024, description="Output kept per command.")
    command_timeout_s: float = Field(default=60.0, gt=0, description="Seconds per command (the default timeout).")
    interrupt_grace_s: float = Field(default=5.0, gt=0, description="Wait after a timeout's kill.")
    engine_wait_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds a new sandbox waits for an unreachable Docker engine before it gives up (the env's "
        "run stops, or its rollout fails).",
    )
    run_id: str = Field(default="default", description="Label naming the run that owns the containers (air clean).")
    environment: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")

    @model_validator(mode="after")
    def _check_memory_budget(self) -> SandboxConfig:
        problem = memory_budget_problem(self.memory, self.tmp_size, self.shm_size, ("memory", "tmp_size", "shm_size"))
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("env_gpu")
    @classmethod
    def _check_gpu(cls, value: str | None) -> str | None:
        parse_env_gpu(value)
        return value

    @property
    def disk_bytes(self) -> int:
        """``disk`` in bytes; 0: no limit."""
        return size_bytes(self.disk)

    @property
    def max_file_bytes(self) -> int:
        """``max_file_size`` in bytes, as the agent's shell and the evaluation's agent-side processes apply it;
        0: no limit."""
        return size_bytes(self.max_file_size)

    def resolved_image(self) -> str:
        """The image setting, else $AIR_IMAGE, else the tag the current recipe hashes to."""
        if self.image:
            return self.image
        if os.environ.get("AIR_IMAGE"):
            return os.environ["AIR_IMAGE"]
        from air.sandbox.image.recipe import default_image_tag

        return default_image_tag()

    def ipc_sysctls(self) -> dict[str, str]:
        """The container's own IPC namespace, bounded: System V shared memory that no process maps was memory the
        OOM killer cannot free (an agent filled its memory cgroup with it, and then no shell could start).
        Segments now go with their last user (``shm_rmid_forced``), all of them together hold at most /dev/shm's
        size, and message queues a few hundred KiB."""
        shm = size_bytes(self.shm_size)
        return {
            "kernel.shm_rmid_forced": "1",
            "kernel.shmmax": str(shm),
            "kernel.shmall": str(max(1, shm // 4096)),  # in pages
            "kernel.shmmni": "64",
            "kernel.msgmni": "16",
            "kernel.msgmnb": "16384",
        }


def owner_labels(run_id: str) -> dict[str, str]:
    proc = psutil.Process(os.getpid())
    return {
        LABEL: "1",
        LABEL_RUN: run_id,
        LABEL_HOST: socket.gethostname(),
        LABEL_PID: str(proc.pid),
        LABEL_STARTED: f"{proc.create_time():.3f}",
    }
