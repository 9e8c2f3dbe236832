"""The interpreter evaluation runs on, checked once per image: nothing of it the agent can write.

Root's runner (eval_runner.py) and the evaluator both start on one interpreter. Whatever that interpreter
executes at start-up (its binary, the shared objects it maps, its standard library, the ``.pth`` files and
``sitecustomize`` of its site-packages) must be out of the agent's reach, or the agent's code runs inside
the evaluation, as the evaluator and as root, and prints the score it likes. In our image that is Debian's
python3 (root's, from packages). MLGym's image (``aigym/mlgym-agent``) has no system python3: its only
Python is a conda env under /home/agent that the agent owns, so it is refused with the fix,
``air build-image --from IMAGE``, which derives an image holding a root-owned copy of the env at
``TRUSTED_ENV`` (air/sandbox/image/prepared.py).

The check runs once per image id (in the first container the image gives, before the agent's first command:
what it runs is the image's own) as one root exec: the interpreter's path and every folder above it, as named
and as resolved; every file and folder of its sys.path, site-packages and prefix (a conda env's lib/ holds
its shared objects); every file the started interpreter maps; the python3 that root's own execs find on the
image's PATH (sandbox/disk_watch's probe runs it as root while the agent works). Each must be root's,
writable neither by the agent's uid or groups nor by everyone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from air.sandbox.container import Sandbox
from air.sandbox.errors import SandboxesUnavailable
from air.sandbox.image.prepared import MLGYM_ENV, TRUSTED_ENV

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageNotPrepared(SandboxesUnavailable):
    """Evaluation in this image would execute something the agent can write: no rollout may start in it
    (a run stops at the first rollout with this message, which names the fix)."""


@dataclass(frozen=True)
class EvaluationPython:
    python: str  # the interpreter the runner and the evaluator start on
    bin: str  # its folder first on the evaluator's PATH ('' for the system's python3)


# Run by the candidate interpreter itself with -I -S -B (no site, no .pth, no user site): it reports what
# it would load and checks each path's owner and mode.
_CHECK = r"""
import json, os, stat, sys, sysconfig, site
python, folder, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
gids, root_python = {int(g) for g in sys.argv[4].split(",") if g}, sys.argv[5]
problems, seen = [], set()

def one(path):
    if path in seen or len(problems) > 20:
        return
    seen.add(path)
    try:
        st = os.lstat(path)
    except OSError:
        return
    why = None
    if st.st_uid != 0:
        why = "owned by the agent" if st.st_uid == uid else f"owned by uid {st.st_uid}"
    elif stat.S_ISLNK(st.st_mode):
        return
    elif st.st_mode & stat.S_IWOTH:
        why = "writable by everyone"
    elif st.st_mode & stat.S_IWGRP and st.st_gid in gids:
        why = f"writable by the agent's group {st.st_gid}"
    if why:
        problems.append(f"{path} is {why}")

def chain(path):
    path = os.path.abspath(path)
    for p in (path, os.path.realpath(path)):
        while True:
            one(p)
            if p == "/":
                break
            p = os.path.dirname(p)

def walk(root):
    chain(root)
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(top, name)
            one(p)
            if os.path.islink(p):
                chain(p)

chain(python)
if root_python:  # the python3 root's own execs find on the image's PATH (the disk watch's probe)
    chain(root_python)
else:
    problems.append("no python3 on the image's PATH for root's own execs (the disk watch's probe runs it)")
roots = [p for p in sys.path if p]
roots += site.getsitepackages()
roots += [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
if os.path.realpath(sys.prefix) not in ("/usr", "/usr/local"):
    roots.append(sys.prefix)
for root in dict.fromkeys(roots):
    walk(root) if os.path.isdir(root) else chain(root)
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            chain(fields[5].strip().removesuffix(" (deleted)"))
print(json.dumps({"python": python, "bin": folder, "problems": problems}))
"""

# The first interpreter found: the prepared image's, MLGym's (refused unless root's all the way), the system's.
_FIND = f"""
agent=$1; check=$2
uid=$(id -u "$agent"); gids=$(id -G "$agent" | tr ' ' ,); root_python=$(command -v python3 || true)
for folder in {TRUSTED_ENV}/bin {MLGYM_ENV}/bin; do
  if [ -x "$folder/python" ]; then
    exec "$folder/python" -I -S -B -c "$check" "$folder/python" "$folder" "$uid" "$gids" "$root_python"
  fi
done
python=$(PATH={SYSTEM_PATH} command -v python3) || {{ echo '{{"python": ""}}'; exit 0; }}
exec "$python" -I -S -B -c "$check" "$python" "" "$uid" "$gids" "$root_python"
"""

_CHECKED: dict[str, EvaluationPython | ImageNotPrepared] = {}  # image id -> its interpreter, or why none


async def evaluation_python(sandbox: Sandbox) -> EvaluationPython:
    """The interpreter evaluation runs on in this sandbox's image; ``ImageNotPrepared`` where the agent could
    change what it executes. Asked once per image id."""
    image_id = sandbox.container.attrs.get("Image", "")  # its id, as the engine reported it at create
    if image_id not in _CHECKED:
        _CHECKED[image_id] = await _check(sandbox)
    found = _CHECKED[image_id]
    if isinstance(found, ImageNotPrepared):
        raise found
    return found


async def _check(sandbox: Sandbox) -> EvaluationPython | ImageNotPrepared:
    image = sandbox.config.resolved_image()
    code, out = await sandbox.exec_root(["bash", "-c", _FIND, "find", sandbox.config.user, _CHECK], timeout=300)
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = None
    if code != 0 or not isinstance(report, dict):
        detail = " ".join(out.split())[-300:]
        return ImageNotPrepared(f"image {image!r}: checking its Python for evaluation failed (exit {code}): {detail}")
    fix = f"`uv run air build-image --from {image}` derives one that can (then run with the tag it prints)"
    if not report.get("python"):
        return ImageNotPrepared(
            f"image {image!r} has no Python to evaluate with (no python3 on {SYSTEM_PATH}, no conda env at "
            f"{MLGYM_ENV}); for an image with MLGym's layout, {fix}"
        )
    problems = report.get("problems") or []
    if problems:
        more = ", among others" if len(problems) > 1 else ""
        return ImageNotPrepared(
            f"image {image!r} cannot be evaluated in: its Python for evaluation, {report['python']}, is the agent's "
            f"to change ({problems[0]}{more}); {fix}"
        )
    return EvaluationPython(str(report["python"]), str(report.get("bin") or ""))
