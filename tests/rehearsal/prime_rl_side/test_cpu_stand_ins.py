"""prime_rl_side/stand_ins/cpu: what install_prime_rl.sh --orchestrator-only puts on the path of today's
prime-rl on a CPU machine. They must import (and show flash-attn's version to transformers' check) and
must refuse any real use, so a rehearsal can never silently compute with them."""

from __future__ import annotations

import subprocess
import sys

from rigs.patience import backstop
from tests.rehearsal.prime_rl_side import PRIME_RL_SIDE

STAND_INS = PRIME_RL_SIDE / "stand_ins" / "cpu"

PROBE = """
import importlib.metadata as metadata
import flash_attn
from flash_attn.flash_attn_interface import flash_attn_varlen_func
from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.utils import StatelessProcessGroup
print(flash_attn.__file__)
print(metadata.version("flash_attn"))
for call in (flash_attn_varlen_func, PyNcclCommunicator, StatelessProcessGroup.create):
    try:
        call()
    except NotImplementedError as exc:
        print("refused:", exc)
"""


def test_the_stand_ins_import_and_refuse_every_call(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=backstop(60), cwd=tmp_path,
        env={"PYTHONPATH": str(STAND_INS), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(STAND_INS / "flash_attn" / "__init__.py") and lines[1] == "2.8.3"
    refused = [line for line in lines if line.startswith("refused:")]
    assert len(refused) == 3 and all("stand-in" in line for line in refused)
