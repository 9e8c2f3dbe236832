"""Which commands get the long (training) timeout: the programs they run, never words in them."""

from __future__ import annotations

import pytest

from air.env.command_programs import programs, runs_long


@pytest.mark.parametrize(
    "command",
    [
        "python train.py",
        "python3.11 -m pip list",
        "/home/agent/miniconda3/envs/mlgym_generic/bin/python train.py",
        "cd src && python train.py --epochs 3",
        "ls; python3 train.py | tee log.txt",
        "CUDA_VISIBLE_DEVICES=0 python train.py",
        "nohup python train.py > log 2>&1 &",
        "timeout 600 python train.py",
        "env -u X OMP_NUM_THREADS=1 python train.py",
        "uv run --with pandas python train.py",
        "conda run -n mlgym_generic python train.py",
        "bash -c 'cd src && python train.py'",
        "torchrun --nproc_per_node=2 train.py",
        "accelerate launch train.py",
        "(cd src; python train.py)",
        "cat > run.sh << 'EOF'\necho hi\nEOF\npython train.py",
    ],
)
def test_training_programs_get_the_long_timeout(command: str) -> None:
    assert runs_long(command), programs(command)


@pytest.mark.parametrize(
    "command",
    [
        "sleep 1000  # python",
        "echo python is slow",
        "grep -r python .",
        "cat train.py | grep python",
        "ls python_scripts/",
        "cat > train.py << 'EOF'\npython = 3\nimport torch  # python\nEOF",
        "pip install torch",
        "vim 'python train.py'",
        "echo 'unbalanced",
    ],
)
def test_words_in_a_command_do_not(command: str) -> None:
    assert not runs_long(command), programs(command)


def test_programs_reads_each_simple_command() -> None:
    assert programs("cd src && X=1 nohup python a.py | tee out; ls -la # python") == ["cd", "python", "tee", "ls"]
