"""What the disk watch counts inside a container (``disk_watch``): the probe, one root process per container, asked
for a measure by a line on its stdin and answering with one JSON line.

A measure counts what the entries (files, folders, links) under every folder the agent can write take on the host's
disk past what the engine counts (its ``SizeRw`` adds up the sizes of what is not a folder): each entry's allocated
blocks (``st_blocks * 512``), one block (``ENTRY_BYTES``, 4 KiB) at least for its inode, less its size, where that
is more than nothing. So an empty folder counts 4 KiB, a file of ``fallocate -n`` (blocks reserved past its size,
which stays 0) counts its blocks, a hard-linked file once, and a sparse file nothing more than its size (the engine
counts its length: the watch stops a sparse file as if it were whole; counting only its blocks would need the
engine's size and the walk to agree to the moment, which an agent making and deleting sparse files would race).
It adds the blocks of files deleted but still open in the agent's processes (the ``/proc/PID/fd`` links ending in
" (deleted)", a stat of the link; read by a fork that drops to the agent's uid and groups, as root without
CAP_SYS_PTRACE cannot read them). It walks by the directory's path, never follows a link, stops at ``MAX_ENTRIES``
(a problem), at the bytes that alone pass the limit (enough said), and at ``PROBE_BUDGET_S``.

Asked ``FREE`` (the watch's stop, over the limit), it frees the blocks the agent's files reserve but do not use
(``fallocate`` takes gigabytes in one call): past a file's end (``-n``) and, inside its size, its never-written
extents (FIEMAP's unwritten ones: they read as zeros, as the hole punched there does); content, size, mode and
times kept. Its walk (as root: it only stats) keeps each regular file of more than a block. Root pins each with
``O_PATH | O_NOFOLLOW`` (no read, no write) and keeps it only if it is the regular file the walk saw (dev, ino); a
fork dropped to the agent's uid reopens it through ``/proc/self/fd`` (the pinned file, not a path the agent could
swap: a folder of mode 0 on the way does not hide it) with ``O_WRONLY | O_NONBLOCK | O_NOCTTY`` (a lease fails,
never waits), makes its own read-only file writable for that moment, truncates it to its own size (ext4 and xfs
free what lies past it; a hole punched there is a no-op on ext4) and punches its unwritten extents. Nothing is
done as root to the agent's files, nothing the agent could not do itself. Then, as the agent, the same for its
processes' open deleted files. Bounded like a measure: ``MAX_ENTRIES``, ``PROBE_BUDGET_S``, a ``BATCH``.

One process for the container's life, not an exec per check: an exec costs the engine some 90 ms of CPU, which at
32 containers checked every 10 s was a tenth of a 2-core host's rollouts. Its walk starts where the agent can
write (found by a walk from ``/`` the first time and every 20th), not at ``/``. The agent can neither signal,
trace nor read it (root's); if it dies or stops answering, the next check starts another.
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

from air.sandbox.protocol import FrameDecoder

if TYPE_CHECKING:
    from docker.models.containers import Container

ENTRY_BYTES = 4096  # the least a file, folder or link takes: one block of the host's disk (for its inode)
MAX_ENTRIES = 200_000  # more entries than this is a problem: the probe stops counting (~2 s for 250k folders)
PROBE_BUDGET_S = 10.0  # a walk stops here and says so (a problem); the engine's inspect's timeout too
PATH_MAX = 4096
FREE = b"free\n"  # the line that asks the probe to free the blocks reserved past the end of the agent's files

# Run as root: python3 -I -c PROBE <agent user> <MAX_ENTRIES> <budget s> <PATH_MAX> <enough> <roots> <ENTRY_BYTES>.
# For each empty line read, one JSON line: {"entries", "bytes", "deleted", "problem"}, and "roots" after a walk
# from "/"; for FREE, {"freed" (bytes), "files", "problem"}
# (the host keeps them per image and hands them to the image's next probe, whose first walk then starts there).
# It stops counting at <enough> bytes, which pass the limit on their own: a small limit is found passed by a
# folder bomb in a fraction of the walk (at 200m: 51,201 folders, not 200,000). Standard library only; of what
# the agent wrote only folders are opened (each entry is stat'ed: one lstat, some 2 us).
PROBE = r"""
import fcntl, json, os, pwd, re, stat, struct, sys, time
FULL_EVERY = 20
BATCH = 256  # files a fork frees: as many O_PATH descriptors held at once
user, cap, budget, path_max = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
enough = int(sys.argv[5])  # bytes that alone pass the limit: counting further tells nothing more
entry = int(sys.argv[7])  # the least an entry takes: one block (an empty file's inode, an empty folder)
agent = pwd.getpwnam(user)
mounts = {"/proc", "/sys", "/dev"}
with open("/proc/self/mountinfo") as f:
    for line in f:
        mounts.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]))
mounts.discard("/")

def under_mount(path):
    return any(path == m or path.startswith(m + "/") for m in mounts)

def walk(out, deadline, roots, found, links, keep=None):
    # (folder, whether its entries count: the agent can write it or one above it). From "/" the first time and
    # every FULL_EVERY-th: the folders the agent can write whose parent it cannot (found), kept for the walks
    # between, which start there (the agent cannot make another such folder: only root can).
    stack = [(root, True) for root in roots] if roots else [("/", False)]
    out["entries"] += len(roots)
    out["bytes"] += entry * len(roots)
    while stack:
        path, counted = stack.pop()
        if len(path) >= path_max:
            return f"a path longer than {path_max} bytes ({path[:80]}...): delete it"
        try:
            it = os.scandir(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"cannot list {path[:80]}...: {exc.strerror}"
        with it:
            for e in it:
                if e.path in mounts:
                    continue
                folder = e.is_dir(follow_symlinks=False)
                count = counted
                if not counted and folder:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    count = st.st_uid != 0 or bool(st.st_mode & 0o022)
                    if count:
                        found.append(e.path)
                if count:
                    out["entries"] += 1
                    if out["entries"] > cap:
                        return f"more than {cap:,} files and folders: delete some"
                    if len(e.path) >= path_max:
                        return f"a path longer than {path_max} bytes ({e.path[:80]}...): delete it"
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        return f"cannot stat {e.path[:80]}...: {exc.strerror}"
                    # What it takes on the host's disk (its blocks, a block at least for its inode) past what the
                    # engine counts (the size of what is not a folder, a hard-linked file once).
                    if not folder and st.st_nlink > 1:
                        if (st.st_dev, st.st_ino) in links:
                            continue
                        links.add((st.st_dev, st.st_ino))
                    out["bytes"] += max(0, max(st.st_blocks * 512, entry) - (0 if folder else st.st_size))
                    if keep is not None:  # a walk to free blocks: every file that may hold some past its end
                        if not folder and stat.S_ISREG(st.st_mode) and st.st_blocks * 512 > entry:
                            keep.append((e.path, st.st_dev, st.st_ino))
                    elif out["bytes"] >= enough:
                        out["cut"] = True  # a walk from "/" cut short has not found every root
                        return None
                if folder:
                    stack.append((e.path, count))
        if time.monotonic() > deadline:
            return f"counting its files took over {budget:g} s: delete some"

def deleted_files(pid, deadline, free):  # [(dev, ino, size)] of pid's open deleted files; PermissionError if hidden
    with open(f"/proc/{pid}/status", "rb") as f:  # bytes: a name need not be UTF-8
        uids = next(line for line in f if line.startswith(b"Uid:")).split()[1:]
    files = []
    for fd in os.listdir(f"/proc/{pid}/fd") if str(agent.pw_uid).encode() in uids else []:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(link)
            if not target.endswith(" (deleted)") or not target.startswith("/") or under_mount(target[:-10]):
                continue
            st = os.stat(link)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if st.st_nlink == 0 and free:  # what was freed of it
            files.append((st.st_dev, st.st_ino, trim(link, st) if stat.S_ISREG(st.st_mode) and st.st_blocks > 8 else 0))
        elif st.st_nlink == 0:
            files.append((st.st_dev, st.st_ino, st.st_blocks * 512))  # allocated: sparse or fallocate -n
        if time.monotonic() > deadline:
            raise TimeoutError
    return files

def may_hold(st):  # blocks past its end, seen (more than its size asks, an extent tree's block spared) or hidden
    alloc, whole = st.st_blocks * 512, -(-st.st_size // entry) * entry  # behind holes (sparse: fewer than its size)
    return alloc > entry and (alloc > whole + entry or alloc < whole)

def trim(link, seen):  # as the agent, on the file `link` names: the blocks it reserves unused freed, all else kept
    try:
        fd = os.open(link, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except PermissionError:  # its own file made read-only: its owner may write it again, for as long as this takes
        if seen.st_uid != agent.pw_uid:
            return 0
        try:
            os.chmod(link, stat.S_IMODE(seen.st_mode) | 0o200)
            try:
                fd = os.open(link, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            finally:
                os.chmod(link, stat.S_IMODE(seen.st_mode))
        except OSError:
            return 0
    except OSError:  # gone, leased, busy: the next stop tries again
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            return 0
        # Truncated to its own size: ext4 and xfs free the blocks past the size (ext4 "even if i_size didn't
        # change"). Not a hole punched past the end: ext4 stops a punch at the size, a no-op there (measured).
        if may_hold(st):
            os.ftruncate(fd, st.st_size)
        try:  # reserved inside its size (fallocate without -n): zeros, as a hole reads
            for start, length in unwritten(fd, st.st_size):
                punch(fd, start, length)
        except OSError:  # no FIEMAP here
            pass
        try:  # ftruncate set its times and, as any write by its owner, dropped set-id bits: as they were
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
            if os.fstat(fd).st_mode != st.st_mode:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
        except OSError:
            pass
        return max(0, st.st_blocks - os.fstat(fd).st_blocks) * 512
    except OSError:
        return 0
    finally:
        os.close(fd)

def unwritten(fd, size):  # (start, length) of the file's extents reserved, never written (FIEMAP, synced first)
    found, start, count = [], 0, 1
    while start < size and count:
        answer = bytearray(struct.pack("=QQIIII", start, size - start, 1, 0, 64, 0) + bytes(56 * 64))  # SYNC
        fcntl.ioctl(fd, 0xC020660B, answer)  # FS_IOC_FIEMAP, into the buffer (a bytes argument stops at 1 KiB)
        count = struct.unpack_from("=I", answer, 20)[0]
        for i in range(count):
            logical, _, length, _, _, flags = struct.unpack_from("=QQQQQI", answer, 32 + 56 * i)
            if flags & 0x800:  # FIEMAP_EXTENT_UNWRITTEN
                found.append((logical, min(length, size - logical)))
            start = logical + length if not flags & 1 else size  # FIEMAP_EXTENT_LAST
    return found

def punch(fd, start, length):  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: its blocks freed, its size kept
    import ctypes
    fallocate = ctypes.CDLL(None).fallocate
    fallocate.argtypes = [ctypes.c_int] * 2 + [ctypes.c_longlong] * 2
    fallocate(fd, 3, start, length)

def deleted(deadline, free=False):  # as the agent: root without CAP_SYS_PTRACE cannot read another uid's /proc/PID/fd
    total, seen = 0, set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        # A process between changing uid and exec (a shell or command starting as the agent) is briefly
        # not dumpable, so unreadable: asked again before it is called one that hides its files.
        for pause in (0.02, 0.1, 0.3, None):
            try:
                files = deleted_files(pid, deadline, free)
                break
            except TimeoutError:
                return total, f"reading its processes' open files took over {budget:g} s"
            except (FileNotFoundError, ProcessLookupError, StopIteration):
                files = []
                break
            except PermissionError:
                if pause is None:
                    return 0, f"process {pid} of the agent hides its open files: end it"
                time.sleep(pause)
        for dev, ino, size in files:
            if (dev, ino) not in seen:
                seen.add((dev, ino))
                total += size
        if time.monotonic() > deadline:
            return total, f"reading its processes' open files took over {budget:g} s"
    return total, None

def as_agent(work):  # work() run in a fork that drops to the agent's uid and groups: its JSON answer, or None
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:  # every pid taken (a fork bomb): the shell's restart frees them
        os.close(r)
        os.close(w)
        return None
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(agent.pw_gid)
            os.setuid(agent.pw_uid)
            os.write(w, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text) if text else None

def measure(roots, full):
    out, deadline, found = {"entries": 0, "bytes": 0, "deleted": 0, "problem": None}, time.monotonic() + budget, []
    out["problem"] = walk(out, deadline, [] if full else roots, found, set())
    if full and out["problem"] is None and not out.get("cut"):
        roots[:] = found
    if out["problem"] is None:
        answer = as_agent(lambda: deleted(deadline))
        out["deleted"], out["problem"] = answer or (0, "the open-file reader failed")
    return out

def free(roots):  # the blocks reserved past the end of the agent's files (open deleted ones too) freed, counted
    out, deadline, keep = {"entries": 0, "bytes": 0, "freed": 0, "files": 0}, time.monotonic() + budget, []
    out["problem"] = walk(out, deadline, roots, [], set(), keep)  # as root: it stats, opens nothing of the agent's
    for start in range(0, len(keep), BATCH):
        fds = []
        for path, dev, ino in keep[start : start + BATCH]:
            try:  # O_PATH: no read, no write, no side effect; the fork reopens what it pins, as the agent
                fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (dev, ino):  # what the walk saw, not a swap
                fds.append((fd, st))
            else:
                os.close(fd)
        freed = as_agent(lambda: [trim(f"/proc/self/fd/{fd}", st) for fd, st in fds]) or []
        for fd, _ in fds:
            os.close(fd)
        out["freed"] += sum(freed)
        out["files"] += sum(1 for n in freed if n)
        if time.monotonic() > deadline:
            out["problem"] = f"freeing its reserved blocks took over {budget:g} s"
            return out
    answer = as_agent(lambda: deleted(deadline, free=True)) or (0, "the open-file reader failed")
    out["freed"] += answer[0]
    out["problem"] = out["problem"] or answer[1]
    return out

roots = json.loads(sys.argv[6])  # where the agent could write in this image's last container ([]: unknown)
number = 0
for line in iter(sys.stdin.readline, ""):  # one answer per line asked; EOF: the watch is done
    if line == "free\n":
        print(json.dumps(free(roots)), flush=True)
        continue
    full, number = number % FULL_EVERY == 0 and not (number == 0 and roots), number + 1
    out = measure(roots, full)
    if full and out["problem"] is None and not out.pop("cut", False):
        out["roots"] = roots
    print(json.dumps(out), flush=True)
"""


class ProbeSession:
    """The probe of one container, over one exec's socket (blocking: the watch asks from a worker thread)."""

    def __init__(self, container: Container, argv: list[str]) -> None:
        self._container = container
        self._argv = argv
        self._sock: socket.socket | None = None
        self._owner: Any = None  # the SDK's response holding the hijacked connection (see Shell)
        self._decoder = FrameDecoder()
        self._pending = b""

    def _open(self) -> socket.socket:
        api = self._container.client.api
        exec_id = api.exec_create(
            self._container.id, self._argv, stdin=True, stdout=True, stderr=True, tty=False, user="root", workdir="/"
        )["Id"]
        self._owner = api.exec_start(exec_id, socket=True)
        self._sock, self._decoder, self._pending = self._owner._sock, FrameDecoder(), b""
        return self._sock

    def ask(self, timeout: float, request: bytes = b"\n") -> str:
        """The JSON line answering ``request`` (an empty line: a measure; ``FREE``: free reserved blocks). Raises
        OSError (the probe is gone: the next ask starts another) or the engine's errors (no exec could start)."""
        sock = self._sock or self._open()
        try:
            sock.settimeout(timeout)
            sock.sendall(request)
            while b"\n" not in self._pending:
                data = sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("the disk probe exited")
                self._pending += self._decoder.feed(data)
        except OSError:
            self.close()
            raise
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(errors="replace")

    def close(self) -> None:
        """End the probe (its stdin closes, it exits); safe from any thread, and more than once."""
        sock, self._sock, self._owner = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


# image id -> the folders its containers' agent could write whose parent it could not (their probes' walks start
# there; a walk from "/" every FULL_EVERY-th check finds any new one): a walk of the image's whole tree saved.
ROOTS_OF_IMAGE: dict[str, list[str]] = {}


def parse_freed(text: str) -> tuple[int, int, str | None]:
    """(bytes freed, files trimmed, problem) from the probe's answer to ``FREE``."""
    try:
        found = json.loads(text)
        return int(found["freed"]), int(found["files"]), found["problem"]
    except (ValueError, KeyError, TypeError):
        return 0, 0, f"its reserved blocks could not be freed ({text[-200:]!r})"


def parse(text: str, image: str = "") -> tuple[int, int, str | None]:
    """(bytes past the engine's count, bytes of files deleted but open, problem) from the probe's line; the roots
    it found kept for ``image``."""
    try:
        found = json.loads(text)
        if image and isinstance(found.get("roots"), list):
            ROOTS_OF_IMAGE[image] = [str(root) for root in found["roots"]]
        return int(found["bytes"]), int(found["deleted"]), found["problem"]
    except (ValueError, KeyError, TypeError):
        return 0, 0, f"its files could not be counted ({text[-200:]!r})"
