"""The trusted part of an evaluation (runs as root in the sandbox; stdlib only).

    eval_runner.py --mode python|plain|model|direct --timeout S --agent USER -- EVALUATOR_ARGV...

1. Lays out the evaluator's private copy of the task (/opt/air-eval/task): the pristine evaluation files,
   data and secrets, readable only by root and the evaluator's user; for Python-entrypoint tasks each of
   the agent's top-level modules is a proxy there (air_agent_proxy). ``direct`` (benchmarks only, to
   measure what the boundary costs) copies the agent's modules in instead, as MLGym runs them. A CSV
   submission is copied in without following links (workspace_guard), and scripts that name the
   workspace are pointed at the copy: every mode but ``model`` evaluates there and writes nothing into
   the workspace. ``model`` (the evaluator reads the agent's files in place) puts the protected files
   back into the workspace, by descriptor, failing if a folder of the task is no longer root's.
2. ``python`` mode: starts the agent's worker as the agent's user (no secrets, memory and process limits,
   the OOM killer's first choice) with a shared-memory call channel to the evaluator.
3. Runs the evaluator as the unprivileged evaluator user with a clean environment, a fresh home and a
   time limit. Its stdout is the score channel: only this process reads it, from a pipe. Given an
   evaluation seed (AIR_EVAL_SEED in root's environment) the evaluator seeds its generators with it
   (eval_bootstrap.py), the worker with a seed derived one way from it.
4. Afterwards: kills the worker, every process the agent's user started during the evaluation and
   every process of the evaluator's user, and (``model`` mode, where the agent's code ran as the
   evaluator) deletes what the evaluator's user left behind.

Prints the evaluator's stdout (first MiB), a separator line, its exit code, then the stderr tail (the
evaluator's, then the agent worker's output). Exit code 124 means the time limit was hit.
"""

from __future__ import annotations

import argparse
import errno
import grp
import hashlib
import os
import pwd
import random
import resource
import shutil
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's folder out
import submission_checks  # noqa: E402
import workspace_guard  # noqa: E402
from call_channel import REGION_SIZE  # noqa: E402
from user_processes import kill_all, state_and_start  # noqa: E402

AIR = Path("/opt/air")
LIB = Path("/opt/air-lib")
EVAL_ROOT = Path("/opt/air-eval")
PRIVATE = EVAL_ROOT / "task"
EVAL_HOME = EVAL_ROOT / "home"
WORKSPACE = Path("/home/agent/workspace")
EVALUATOR_USER = "air-eval"
STDOUT_KEEP = 1_000_000
STDERR_KEEP = 20_000
WORKER_MEMORY = 2 * 1024**3  # address space of the agent's worker
WORKER_PROCESSES = 0  # RLIMIT_NPROC: the worker may not fork or start threads
EVALUATOR_PROCESSES = 512
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
LEFTOVER_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/home")


class Drain(threading.Thread):
    """Reads a pipe to its end, keeping the head or the tail (a 1 GB output costs no memory or disk)."""

    def __init__(self, fd: int, keep: int, tail: bool) -> None:
        super().__init__(daemon=True)
        self.fd, self.keep, self.tail = fd, keep, tail
        self.data = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while chunk := os.read(self.fd, 1 << 16):
            self.data += chunk
            if len(self.data) > self.keep:
                over = len(self.data) - self.keep
                self.dropped += over
                if self.tail:
                    del self.data[:over]
                else:
                    del self.data[self.keep :]
        os.close(self.fd)


def _chown_tree(root: Path, gid: int) -> None:
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            path.unlink()  # nothing in the private copy points elsewhere
            continue
        os.chown(path, 0, gid)
        executable = path.is_dir() or path.stat().st_mode & 0o100
        os.chmod(path, 0o750 if executable else 0o640)


def listed(name: str) -> list[str]:
    """The lines of a list the workspace set-up left in /opt/air (``air/tasks/workspace.py`` writes them)."""
    return [line.strip() for line in (AIR / name).read_text().splitlines() if line.strip()]


def prepare_private_copy(mode: str, protected: set[str], gid: int, agent_modules: list[str]) -> None:
    shutil.rmtree(EVAL_ROOT, ignore_errors=True)
    EVAL_ROOT.mkdir(mode=0o750)
    os.chown(EVAL_ROOT, 0, gid)
    shutil.copytree(AIR / "pristine", PRIVATE, symlinks=True)
    if mode != "model":  # scripts that name the workspace (MLGym's titanic, house prices) read this copy
        for path in PRIVATE.rglob("*.py"):
            text = path.read_bytes()
            if str(WORKSPACE).encode() in text:
                path.write_bytes(text.replace(str(WORKSPACE).encode(), str(PRIVATE).encode()))
    if mode in ("python", "direct"):
        from air_agent_proxy import PROXY_SOURCE

        for path in WORKSPACE.glob("*.py"):  # the task's own modules only: a planted `pickle5.py` stays out
            if path.name in agent_modules and path.name not in protected and not (PRIVATE / path.name).exists():
                if mode == "python":
                    (PRIVATE / path.name).write_text(PROXY_SOURCE)
                elif path.is_file() and not path.is_symlink():
                    shutil.copyfile(path, PRIVATE / path.name)
    _chown_tree(PRIVATE, gid)
    EVAL_HOME.mkdir(mode=0o700)


def _limits(memory: int | None, processes: int, cpus: set[int] | None = None):
    def apply() -> None:
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if cpus:
            os.sched_setaffinity(0, cpus)

    return apply


def split_cpus() -> tuple[set[int] | None, set[int] | None]:
    """(the evaluator's CPUs, the worker's): one of ours, at random, for the worker, the rest for the
    evaluator. Left to itself the scheduler often queues a woken process on its waker's CPU, where it
    waits out the waker's spin: a quarter of a millisecond per call instead of a few microseconds."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    worker = random.choice(cpus)
    return set(cpus) - {worker}, {worker}


def _oom_first(pid: int) -> None:
    """Make the process the OOM killer's first choice (a memory bomb must not take the evaluator)."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _owned_by(uid: int):
    """(path, lstat) of everything under LEFTOVER_DIRS that ``uid`` owns, deepest first."""
    for top in LEFTOVER_DIRS:
        for dirpath, dirnames, filenames in os.walk(top, topdown=False):
            for name in filenames + dirnames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if st.st_uid == uid:
                    yield path, st


def remove_leftovers(uid: int) -> None:
    """Files the evaluator's user created where others could find them later (a channel to the agent)."""
    for path, st in _owned_by(uid):
        try:
            shutil.rmtree(path) if stat.S_ISDIR(st.st_mode) else os.unlink(path)
        except OSError:
            pass


def close_shared_writes(uid: int) -> None:
    """Model tasks run the agent's code as the evaluator: files and folders the agent made writable by
    others would let it leave what it read for the agent to find. Take that write permission away."""
    for path, st in _owned_by(uid):
        if st.st_mode & 0o002 and not stat.S_ISLNK(st.st_mode):
            try:
                os.chmod(path, st.st_mode & ~0o002)
            except OSError:
                pass


def seed_variables() -> tuple[dict[str, str], dict[str, str]]:
    """(the evaluator's, the agent worker's) seed variables, from the evaluation seed root was given in its
    environment (never on a command line, which the agent's worker could read). The worker's seed is derived
    one way from the evaluator's: the agent's code can read its own, never the one its opponent draws from."""
    seed = os.environ.get("AIR_EVAL_SEED", "")
    if not seed.isdigit():
        return {}, {}
    worker = int.from_bytes(hashlib.sha256(f"air-agent/{seed}".encode()).digest()[:4], "big")
    return (
        {"AIR_EVAL_SEED": seed, "PYTHONHASHSEED": str(int(seed) % 2**32)},
        {"AIR_EVAL_SEED": str(worker), "PYTHONHASHSEED": str(worker)},
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("python", "plain", "model", "direct"), required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--separator", required=True)
    parser.add_argument("--submission", help="the workspace file the evaluator scores, copied to its private copy")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    try:
        return run(args)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # The agent filled the container's disk (quota, /tmp): its doing, said plainly (a failed evaluation).
        sys.stdout.write(
            f"\n{args.separator}\n1\nThe container's disk is full ({exc.strerror}), so the workspace could not be "
            "copied for evaluation. Free space (large files in the workspace or /tmp) and try again.\n"
        )
        return 0


def run(args: argparse.Namespace) -> int:
    evaluator_argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    agent = pwd.getpwnam(args.agent)
    gid = grp.getgrnam(EVALUATOR_USER).gr_gid
    protected, secret = set(listed("protected.txt")), set(listed("secret.txt"))
    agent_modules = listed("agent_modules.txt")
    started = state_and_start("self")[1]

    prepare_private_copy(args.mode, protected, gid, agent_modules)
    try:
        if args.submission:
            workspace_guard.copy_submission(args.submission, PRIVATE / args.submission)
            os.chown(PRIVATE / args.submission, 0, gid)
            os.chmod(PRIVATE / args.submission, 0o640)
            column = "".join(listed("id_column.txt"))
            refused = column and submission_checks.repeated_id(PRIVATE / args.submission, column)
            if refused:  # framed like a failed evaluator: exit code 1, the reason as its stderr
                sys.stdout.write(f"\n{args.separator}\n1\n{refused}\n")
                return 0
        if args.mode == "model":  # the evaluator works in the workspace: the task's files back in it
            restore_protected(protected, secret, gid)
            close_shared_writes(agent.pw_uid)
        return evaluate(args, evaluator_argv, agent, started, agent_modules)
    except workspace_guard.WorkspaceProblem as problem:
        sys.stdout.write(f"\n{args.separator}\nno-submission\n{problem}\n")
        return 0
    finally:
        if args.mode == "model":
            for rel in secret:
                workspace_guard.remove(rel)
        shutil.rmtree(EVAL_ROOT, ignore_errors=True)


def restore_protected(protected: set[str], secret: set[str], gid: int) -> None:
    """The pristine protected files into the workspace (secrets readable by the evaluator only); a file
    still root's in a folder still root's is left alone (the agent cannot have changed it)."""
    for rel in sorted(protected):
        if "/" in rel and rel not in secret and workspace_guard.is_tasks_own(rel):
            continue
        owner, mode = ((0, gid), 0o640) if rel in secret else ((0, 0), 0o644)
        workspace_guard.restore(rel, AIR / "pristine" / rel, *owner, mode)


def evaluate(
    args: argparse.Namespace,
    evaluator_argv: list[str],
    agent: pwd.struct_passwd,
    started: int,
    agent_modules: list[str],
) -> int:
    """Run the evaluator (and, for Python tasks, the agent's worker) and print the framed result."""
    evaluator = pwd.getpwnam(EVALUATOR_USER)
    gid = grp.getgrnam(EVALUATOR_USER).gr_gid
    os.chown(EVAL_HOME, evaluator.pw_uid, gid)
    env = {"PATH": open(AIR / "path.txt").read().strip(), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    if args.mode == "model":  # torch.load of the agent's files: tensors only, no pickled code (torch >= 2.4)
        env["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    if os.environ.get("NVIDIA_VISIBLE_DEVICES"):
        env["NVIDIA_VISIBLE_DEVICES"] = os.environ["NVIDIA_VISIBLE_DEVICES"]
    evaluator_seed, worker_seed = seed_variables()
    python = evaluator_argv[0]
    worker = worker_out = None
    pass_fds: tuple[int, ...] = ()
    evaluator_cpus = None
    if args.mode == "python":
        evaluator_cpus, worker_cpus = split_cpus()
        region = os.memfd_create("air-channel")
        os.ftruncate(region, REGION_SIZE)
        for_evaluator, for_worker = socket.socketpair()
        worker_read, worker_write = os.pipe()
        worker = subprocess.Popen(
            [python, "-B", str(LIB / "agent_worker.py"), str(region), str(for_worker.fileno()), str(WORKSPACE)],
            cwd=WORKSPACE,
            env={**env, "HOME": agent.pw_dir, **dict.fromkeys(BLAS_THREAD_VARIABLES, "1"), **worker_seed},
            stdin=subprocess.DEVNULL,
            stdout=worker_write,
            stderr=worker_write,
            pass_fds=(region, for_worker.fileno()),
            user=agent.pw_uid,
            group=agent.pw_gid,
            extra_groups=[],
            start_new_session=True,
            preexec_fn=_limits(WORKER_MEMORY, WORKER_PROCESSES, worker_cpus),
        )
        _oom_first(worker.pid)
        os.close(worker_write)
        for_worker.close()
        worker_out = Drain(worker_read, STDERR_KEEP, tail=True)
        worker_out.start()
        env["AIR_AGENT_CHANNEL"] = f"{region},{for_evaluator.fileno()}"
        pass_fds = (region, for_evaluator.fileno())
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    evaluator_env = {**env, "HOME": str(EVAL_HOME), "TMPDIR": str(EVAL_HOME), **evaluator_seed}
    if args.mode == "python":  # checked by the proxy
        evaluator_env["AIR_RETURN_LENGTHS"] = ",".join(listed("return_lengths.txt"))
    if args.mode == "model":  # the agent's modules it may import from the workspace (eval_bootstrap.py)
        evaluator_env["AIR_AGENT_MODULES"] = ",".join(name.removesuffix(".py").rstrip("/") for name in agent_modules)
    if evaluator_cpus:  # BLAS threads beyond its CPUs would take turns with it on them, ~60 us a call
        evaluator_env.update(dict.fromkeys(BLAS_THREAD_VARIABLES, str(len(evaluator_cpus))))
    evaluation = subprocess.Popen(
        evaluator_argv,
        cwd=WORKSPACE if args.mode == "model" else PRIVATE,
        env=evaluator_env,
        stdin=subprocess.DEVNULL,
        stdout=out_write,
        stderr=err_write,
        pass_fds=pass_fds,
        user=evaluator.pw_uid,
        group=gid,
        extra_groups=[],
        start_new_session=True,
        preexec_fn=_limits(None, EVALUATOR_PROCESSES, evaluator_cpus),
    )
    os.close(out_write)
    os.close(err_write)
    if args.mode == "python":
        os.close(region)
        for_evaluator.close()
    stdout, stderr = Drain(out_read, STDOUT_KEEP, tail=False), Drain(err_read, STDERR_KEEP, tail=True)
    stdout.start()
    stderr.start()
    try:
        rc = evaluation.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        rc = 124
    kill_all(evaluator.pw_uid)
    if worker is not None:
        kill_all(agent.pw_uid, started_after=started)  # the worker and whatever it started
        worker.wait()
    for drain in (stdout, stderr, worker_out):
        if drain is not None:
            drain.join(timeout=10)
    if args.mode == "model":  # only there did code the agent controls run as the evaluator
        remove_leftovers(evaluator.pw_uid)

    out = sys.stdout.buffer
    out.write(bytes(stdout.data))
    overflow = f" stdout-overflow:{stdout.dropped + len(stdout.data)}" if stdout.dropped else ""
    out.write(f"\n{args.separator}\n{rc}{overflow}\n".encode())
    out.write(bytes(stderr.data))
    if worker_out is not None and worker_out.data:
        out.write(b"\n[output of the agent's code during evaluation]\n" + bytes(worker_out.data))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
