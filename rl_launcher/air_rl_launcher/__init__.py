"""`uv run rl @ configs/...` in an air-agent checkout: air/cli/rl_command.py does the work (see its docstring)."""


def main() -> int:
    from air.cli.rl_command import main as rl

    return rl()
