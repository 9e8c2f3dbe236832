"""The trusted part of an evaluation (runs as root in the sandbox; stdlib only).

    AIR_EVAL_KEY=<hex> [AIR_EVAL_SEED=<n>] python3 -I -B eval_runner.py --mode python|plain|model|direct \
        --timeout S --agent USER --submission-kind csv|yaml|none -- EVALUATOR_ARGV...

0. Stops every process of the agent for the whole evaluation and resumes them afterwards (agent_freeze:
   the signal is sent by a fork holding nothing of root's); if one still runs, no evaluation.
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
   time limit (the task's evaluation budget). Its stdout is the score channel: only this process reads it,
   from a pipe. Given an evaluation seed the evaluator seeds its generators with it (eval_bootstrap.py),
   the worker with a seed derived one way from it.
4. Afterwards: kills the worker, every process the agent's user started during the evaluation and
   every process of the evaluator's user, and (``model`` mode, where the agent's code ran as the
   evaluator) deletes what the evaluator's user left behind. Every wait is bounded.

The key and the seed come in the exec's environment (never on a command line, which any process may read)
and are taken out of it before anything starts. Writes exactly one frame signed with the key (eval_frame):
the evaluator's stdout (first MiB), exit code (124: the time limit) and stderr tail, then the agent
worker's output; or why there was no evaluation.
"""

from __future__ import annotations

import argparse
import errno
import grp
import hashlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's folder out
import agent_channels  # noqa: E402
import agent_freeze  # noqa: E402
import eval_frame  # noqa: E402
import submission_checks  # noqa: E402
import workspace_guard  # noqa: E402
from call_channel import REGION_SIZE  # noqa: E402
from eval_processes import Drain, close_shared_writes, limits, oom_first, remove_leftovers, split_cpus  # noqa: E402
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
WORKER_REAP_S = 5.0  # how long the killed worker is waited for
WORKER_PROCESSES = 0  # RLIMIT_NPROC: the worker may not fork or start threads
EVALUATOR_PROCESSES = 512
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


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


def seed_variables(seed: str) -> tuple[dict[str, str], dict[str, str]]:
    """(the evaluator's, the agent worker's) seed variables, from the evaluation seed root was given in its
    environment (never on a command line, which the agent's worker could read). The worker's seed is derived
    one way from the evaluator's: the agent's code can read its own, never the one its opponent draws from."""
    if not seed.isdigit():
        return {}, {}
    worker = int.from_bytes(hashlib.sha256(f"air-agent/{seed}".encode()).digest()[:4], "big")
    return (
        {"AIR_EVAL_SEED": seed, "PYTHONHASHSEED": str(int(seed) % 2**32)},
        {"AIR_EVAL_SEED": str(worker), "PYTHONHASHSEED": str(worker)},
    )


def take_secrets() -> tuple[bytes, str]:
    """(the frame's key, the evaluation seed) out of this process's environment, so that nothing started
    from here inherits them (every child gets an explicit environment anyway)."""
    key = os.environ.pop(eval_frame.KEY_VARIABLE, "")
    seed = os.environ.pop("AIR_EVAL_SEED", "")
    return (bytes.fromhex(key) if len(key) >= 32 else b""), seed


def main() -> int:
    key, seed = take_secrets()
    # The exec's output carries one signed frame and nothing else: our own descriptors 0-2 go to /dev/null
    # (a stray warning cannot corrupt the frame), the frame is written on a private duplicate.
    out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if not key:
        out.write(b"the evaluation was started without its key: no score\n")
        return 1
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("python", "plain", "model", "direct"), required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--submission-kind", choices=("csv", "yaml", "none"), required=True)
    parser.add_argument("--max-file-size", type=int, default=0, help="bytes; the agent's shell's cap (0: none)")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    args.seed = seed
    out.write(eval_frame.encode(key, evaluate_frozen(args)))
    out.flush()
    return 0


def evaluate_frozen(args: argparse.Namespace) -> dict:
    """The evaluation's payload: every process of the agent stopped throughout, resumed afterwards."""
    agent = pwd.getpwnam(args.agent)
    try:
        still = agent_freeze.freeze(agent.pw_uid)
        if still:
            listed_pids = " ".join(map(str, still[:20]))
            return failure(
                "The agent's processes could not all be stopped for the evaluation "
                f"(still running: {listed_pids}): no score."
            )
        return run(args, agent)
    except Exception as exc:  # noqa: BLE001 - any fault is one failed evaluation, said with its cause
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # The agent filled the container's disk (quota, /tmp): its doing, said plainly (a failed evaluation).
            return result(
                rc=1,
                stderr=f"The container's disk is full ({exc.strerror}), so the workspace could not be "
                "copied for evaluation. Free space (large files in the workspace or /tmp) and try again.\n",
            )
        return failure(f"a fault in the evaluation's runner:\n{traceback.format_exc()[-3000:]}")
    finally:
        agent_freeze.thaw(agent.pw_uid)


def failure(message: str) -> dict:
    return {"kind": "failed", "message": message}


def no_submission(message: str) -> dict:
    return {"kind": "no-submission", "message": message}


def result(rc: int, stdout: str = "", stderr: str = "", stdout_bytes: int = 0, dropped: int = 0) -> dict:
    """The evaluator's outcome: its stdout (the first MiB), exit code, stderr tail (the agent's output after)."""
    return {
        "kind": "result",
        "rc": rc,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_bytes": stdout_bytes,
        "dropped": dropped,
    }


def find_yaml_submission() -> str | None:
    """A model task's config file: the first ``*.yaml`` regular file in the workspace outside data/ (no link
    followed), or None."""
    found = []
    for dirpath, dirnames, filenames in os.walk(WORKSPACE):
        if dirpath == str(WORKSPACE):
            dirnames[:] = [d for d in dirnames if d != "data"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith(".yaml") and stat.S_ISREG(os.lstat(path).st_mode):
                found.append(path)
    return min(found) if found else None


def run(args: argparse.Namespace, agent: pwd.struct_passwd) -> dict:
    evaluator_argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    submission = copied = None
    if args.submission_kind == "csv":  # scored from the private copy, where it is copied without following links
        copied = "submission.csv"
        submission = str(PRIVATE / copied)
    if args.submission_kind == "yaml":  # a model task's config file, read in place (find follows no link)
        submission = find_yaml_submission()
        if submission is None:
            return no_submission(
                f"No submission artefact found: the task expects a config file (*.yaml) in {WORKSPACE} next to "
                "your trained model."
            )
    if submission is not None:
        evaluator_argv = [arg.replace("{submission}", submission) for arg in evaluator_argv]
    gid = grp.getgrnam(EVALUATOR_USER).gr_gid
    protected, secret = set(listed("protected.txt")), set(listed("secret.txt"))
    agent_modules = listed("agent_modules.txt")
    started = state_and_start("self")[1]

    prepare_private_copy(args.mode, protected, gid, agent_modules)
    try:
        if copied:
            workspace_guard.copy_submission(copied, PRIVATE / copied)
            os.chown(PRIVATE / copied, 0, gid)
            os.chmod(PRIVATE / copied, 0o640)
            column = "".join(listed("id_column.txt"))
            refused = column and submission_checks.repeated_id(PRIVATE / copied, column)
            if refused:  # reported like a failed evaluator: exit code 1, the reason as its stderr
                return result(rc=1, stderr=refused)
        if args.mode == "model":  # the evaluator works in the workspace: the task's files back in it
            restore_protected(protected, secret, gid)
            close_shared_writes(agent.pw_uid)
            agent_channels.close_before_model_evaluation(agent.pw_uid, agent.pw_gid)
        return evaluate(args, evaluator_argv, agent, started, agent_modules)
    except workspace_guard.WorkspaceProblem as problem:
        return no_submission(str(problem))
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
) -> dict:
    """Run the evaluator (and, for Python tasks, the agent's worker): the result's payload."""
    evaluator = pwd.getpwnam(EVALUATOR_USER)
    gid = grp.getgrnam(EVALUATOR_USER).gr_gid
    os.chown(EVAL_HOME, evaluator.pw_uid, gid)
    env = {"PATH": open(AIR / "path.txt").read().strip(), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    if args.mode == "model":  # torch.load of the agent's files: tensors only, no pickled code (torch >= 2.4)
        env["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    if os.environ.get("NVIDIA_VISIBLE_DEVICES"):
        env["NVIDIA_VISIBLE_DEVICES"] = os.environ["NVIDIA_VISIBLE_DEVICES"]
    evaluator_seed, worker_seed = seed_variables(args.seed)
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
            # -s: no user site (the agent's ~/.local); the environment is ours alone. The agent's own code by
            # design: its workspace modules, which the worker imports.
            [python, "-s", "-B", str(LIB / "agent_worker.py"), str(region), str(for_worker.fileno()), str(WORKSPACE)],
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
            preexec_fn=limits(WORKER_MEMORY, WORKER_PROCESSES, worker_cpus, args.max_file_size),
        )
        oom_first(worker.pid)
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
        preexec_fn=limits(None, EVALUATOR_PROCESSES, evaluator_cpus, args.max_file_size),
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
    evaluator_ended = kill_all(evaluator.pw_uid)
    if worker is not None:
        kill_all(agent.pw_uid, started_after=started)  # the worker and whatever it started
        try:  # bounded: a worker held as a traced zombie must not hold the evaluation
            worker.wait(timeout=WORKER_REAP_S)
        except subprocess.TimeoutExpired:
            pass
    for drain in (stdout, stderr, worker_out):
        if drain is not None:
            drain.join(timeout=10)
    if args.mode == "model":  # only there did code the agent controls run as the evaluator
        remove_leftovers(evaluator.pw_uid)
        agent_channels.remove_ipc(evaluator.pw_uid, shared_only=False)
    if not evaluator_ended:  # never thaw the agent beside a process of the evaluation
        return failure("A process of the evaluation could not be ended: no score.")

    errors = bytes(stderr.data)
    if worker_out is not None and worker_out.data:
        errors += b"\n[output of the agent's code during evaluation]\n" + bytes(worker_out.data)
    return result(
        rc=rc,
        stdout=bytes(stdout.data).decode("utf-8", "replace"),
        stderr=errors.decode("utf-8", "replace"),
        stdout_bytes=stdout.dropped + len(stdout.data),
        dropped=stdout.dropped,
    )


if __name__ == "__main__":
    sys.exit(main())
