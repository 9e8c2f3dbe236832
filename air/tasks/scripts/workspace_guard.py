"""Root's access to the agent's workspace during an evaluation (runs as root in the sandbox; stdlib only).

Every folder on the way, /home/agent/workspace included, belongs to the agent or sits in one of its
folders, so a path root follows could lead anywhere the agent planted a link. Nothing here follows one:
folders are opened one component at a time with O_NOFOLLOW and used by descriptor; files are opened
with O_NOFOLLOW, checked to be regular, and created with O_EXCL. The agent is frozen meanwhile, so what
is checked is what is used.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

WORKSPACE = "/home/agent/workspace"
SUBMISSION_LIMIT = 1 << 30  # bytes of a submission copied for the evaluator
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceProblem(Exception):
    """The workspace is not as evaluation needs it; the message is worded for the agent."""


def open_folder(path: str, base: int | None = None) -> int:
    """A descriptor of the folder ``path`` (absolute, or relative to ``base``), no component a link."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise WorkspaceProblem(f"{path}: '..' is not allowed")
    fd = os.open("/", _DIR_FLAGS) if base is None else os.dup(base)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP (a link), ENOTDIR, ENOENT
                raise WorkspaceProblem(f"{part} (in {path}) is not a folder: {exc.strerror or exc}") from exc
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def copy_submission(name: str, dest: Path, limit: int = SUBMISSION_LIMIT) -> None:
    """Copy the workspace's regular file ``name`` to ``dest`` (root's); raises WorkspaceProblem."""
    where = f"{WORKSPACE}/{name}"
    ws = open_folder(WORKSPACE)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=ws)
        except FileNotFoundError:
            raise WorkspaceProblem(
                f"No submission file found at {where}. Write your predictions there (see the task "
                "description), then validate."
            ) from None
        except OSError as exc:  # ELOOP: the name is a link
            if os.path.islink(f"/proc/self/fd/{ws}/{name}"):
                raise WorkspaceProblem(
                    f"{name} is a symbolic link; write your predictions to a regular file at {where}"
                ) from None
            raise WorkspaceProblem(f"{where} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(ws)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceProblem(f"{where} is not a regular file; write your predictions to a file there")
        if info.st_size > limit:
            raise WorkspaceProblem(f"{where} is {info.st_size} bytes; a submission may have at most {limit}")
        os.set_blocking(fd, True)
        with open(dest, "wb") as out, os.fdopen(os.dup(fd), "rb") as src:
            copied = 0
            while chunk := src.read(1 << 20):
                copied += len(chunk)
                if copied > limit:
                    raise WorkspaceProblem(f"{where} grew past {limit} bytes while it was copied")
                out.write(chunk)
    finally:
        os.close(fd)


def _folder_for(ws: int, rel: str, create: bool = True) -> tuple[int, str]:
    """(descriptor of the folder holding ``rel``, its last name): the folders on the way are the task's
    own (root's); a missing one is made root's (``create``), anything else there fails the evaluation."""
    *folders, name = rel.split("/")
    fd = os.dup(ws)
    try:
        for i, part in enumerate(folders):
            shown = "/".join(folders[: i + 1])
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
                raise WorkspaceProblem(
                    f"{shown}/ in the workspace is no longer the task's own folder (it was replaced or moved): "
                    f"the evaluation cannot trust what it holds. Put the original back (it is still there under "
                    f"the name you gave it), then validate."
                )
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd, name
    except BaseException:
        os.close(fd)
        raise


def _remove(folder: int, name: str) -> None:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        os.rename(name, f"{name}.moved-by-evaluation", src_dir_fd=folder, dst_dir_fd=folder)
    else:
        os.unlink(name, dir_fd=folder)


def restore(rel: str, source: Path, uid: int, gid: int, mode: int) -> None:
    """Put the pristine ``source`` at workspace path ``rel``, owned uid:gid with ``mode``, replacing
    whatever the agent left there; the file is private from its first byte (created O_EXCL, mode set
    before any content)."""
    ws = open_folder(WORKSPACE)
    try:
        folder, name = _folder_for(ws, rel)
    finally:
        os.close(ws)
    try:
        _remove(folder, name)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        with os.fdopen(fd, "wb") as out:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            out.write(source.read_bytes())
    finally:
        os.close(folder)


def _tasks_folder_for(rel: str) -> tuple[int, str] | None:
    """(descriptor of the folder holding workspace path ``rel``, its last name) if that folder and those
    above it are still the task's own, else None."""
    try:
        ws = open_folder(WORKSPACE)
    except WorkspaceProblem:
        return None
    try:
        return _folder_for(ws, rel, create=False)
    except (WorkspaceProblem, OSError):
        return None
    finally:
        os.close(ws)


def is_tasks_own(rel: str) -> bool:
    """Whether workspace path ``rel`` is still a regular file of root's in folders of root's: nothing the
    agent can have changed."""
    found = _tasks_folder_for(rel)
    if found is None:
        return False
    folder, name = found
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(folder)
    return stat.S_ISREG(info.st_mode) and info.st_uid == 0


def remove(rel: str) -> None:
    """Delete workspace path ``rel`` (a file put there by ``restore``) if its folders are still the task's."""
    found = _tasks_folder_for(rel)
    if found is None:
        return
    folder, name = found
    try:
        _remove(folder, name)
    finally:
        os.close(folder)
