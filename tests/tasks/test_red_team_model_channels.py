"""Red team, model tasks (issue 39, item 5), through the env's rollout path: the agent's code runs as the evaluator
(air-eval) while every process of the agent is frozen. It must leave nothing running after the evaluation (a process
whose name a text read of /proc could not decode survived `kill_all`), and nothing it sends may reach the agent
later: not a listening socket's backlog (loopback or abstract), a FIFO the agent holds open, nor a System V queue
the agent made writable by others."""

from __future__ import annotations

import pytest

from tests.mlgym_like import MODEL_IMPORTS_TASK, write_own_task
from tests.red_team import STOP, background, check_rollout, heredoc, run_attack

pytestmark = pytest.mark.docker

LOOT = "/home/agent/rt_loot"
SENT = "EVALUATOR-WAS-HERE"
COMMON = """
import ctypes, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
KEY, IPC_CREAT, IPC_NOWAIT = 0x5254, 0o1000, 0o4000


class Message(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_long), ("text", ctypes.c_char * 200)]
"""

# The agent's listener, started before the evaluation: every channel open, whatever arrives kept in LOOT.
LISTENER = (
    COMMON
    + f"""
def keep(data):
    with open("{LOOT}", "ab") as f:
        f.write(data + b"\\n")


queue = libc.msgget(KEY, IPC_CREAT | 0o666)
os.mkfifo("/tmp/rt_fifo", 0o666)
os.chmod("/tmp/rt_fifo", 0o666)
fifo = os.open("/tmp/rt_fifo", os.O_RDWR | os.O_NONBLOCK)
abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
abstract.bind("\\0rt-leak")
tcp = socket.socket()
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("127.0.0.1", 47111))
tcp.listen(8)
tcp.setblocking(False)
abstract.setblocking(False)
deadline = time.time() + 200
while time.time() < deadline and not os.path.exists("{STOP}"):
    for read in (lambda: os.read(fifo, 200), lambda: abstract.recv(200), lambda: tcp.accept()[0].recv(200)):
        try:
            data = read()
            if data:
                keep(data)
        except (BlockingIOError, OSError):
            pass
    message = Message()
    if libc.msgrcv(queue, ctypes.byref(message), 200, 0, IPC_NOWAIT) > 0:
        keep(message.text)
    time.sleep(0.01)
"""
)

# The agent's module, imported by the evaluator (as air-eval): a survivor with a name that is not UTF-8, and the
# evaluation's seed sent down every channel.
HELPERS = (
    COMMON
    + f"""
def _leak():
    sent = ("{SENT} " + os.environ.get("AIR_EVAL_SEED", "?")).encode()
    try:
        os.write(os.open("/tmp/rt_fifo", os.O_WRONLY | os.O_NONBLOCK), sent)
    except OSError:
        pass
    for family, address in ((socket.AF_UNIX, "\\0rt-leak"), (socket.AF_INET, ("127.0.0.1", 47111))):
        try:
            s = socket.socket(family, socket.SOCK_DGRAM if family == socket.AF_UNIX else socket.SOCK_STREAM)
            s.connect(address)
            s.send(sent)
        except OSError:
            pass
    queue = libc.msgget(KEY, 0)
    if queue >= 0:
        message = Message(1, sent)
        libc.msgsnd(queue, ctypes.byref(message), 200, IPC_NOWAIT)
    if os.fork() == 0:
        os.setsid()
        libc.prctl(15, b"\\xff\\xferest", 0, 0, 0)
        time.sleep(120)
        os._exit(0)


def reward():
    _leak()
    return 2.0
"""
)

AIR_EVAL_PROCESSES = (
    "n=0; me=$(getent passwd air-eval | cut -d: -f3); for f in /proc/[0-9]*/status; do "
    'u=$(awk \'/^Uid:/{print $2}\' "$f" 2>/dev/null); [ "$u" = "$me" ] && n=$((n+1)); done; echo air-eval: $n'
)


@pytest.mark.timeout(400)
async def test_a_model_evaluator_leaves_no_process_and_reaches_the_agent_by_no_channel(tmp_path, docker_image):
    root = write_own_task(tmp_path / "MLGym", "modelchannels", *MODEL_IMPORTS_TASK)
    commands = [
        "echo a: 1 > config.yaml",
        background("listener", LISTENER),
        heredoc("src/helpers.py", HELPERS),
        "validate",
        f"sleep 2; {AIR_EVAL_PROCESSES}; cat {LOOT} 2>&1; touch {STOP}; true",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands, task="modelchannels", task_root=str(root))
    check_rollout(output, record, task="modelchannels", baseline=2.0, ceiling=2.0, secrets=[])
    evaluation = record.turns[3].evaluation
    assert evaluation is not None and evaluation.status == "ok" and evaluation.score == 2.0, evaluation
    after = record.turns[4].output
    assert "air-eval: 0" in after, f"a process of the evaluator outlived it: {after!r}"
    assert SENT not in after, f"the evaluator reached the agent: {after!r}"
