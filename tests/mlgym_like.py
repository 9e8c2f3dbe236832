"""Builds a small task root in MLGym's layout, written here from scratch, for the runtime tests:
a task with MLGym's titanic id (so its known answer-file leak applies), whose scripts hard-code
absolute /home/agent/workspace paths as MLGym's do, plus tasks for each odd evaluation output."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

EVALUATE_ABSOLUTE = textwrap.dedent(
    """
    import argparse, json
    import pandas as pd
    parser = argparse.ArgumentParser()
    parser.add_argument("--submission_file", required=True)
    args = parser.parse_args()
    truth = pd.read_csv("/home/agent/workspace/data/ground_truth.csv")
    sub = pd.read_csv(args.submission_file)
    merged = truth.merge(sub, on="PassengerId", suffixes=("_true", "_pred"))
    acc = float((merged["Survived_true"] == merged["Survived_pred"]).mean()) if len(sub) == len(truth) else 0.0
    print(json.dumps({"accuracy": round(acc, 4)}))
    """
)


def write_mlgym_like_root(root: Path) -> Path:
    (root / "configs" / "tasks").mkdir(parents=True)
    (root / "configs" / "datasets").mkdir(parents=True)
    data = root / "data" / "shipwreck"
    (data / "data").mkdir(parents=True)
    ids = list(range(1, 21))
    (data / "data" / "train.csv").write_text(
        "PassengerId,Age,Survived\n" + "".join(f"{i},{20 + i},{i % 2}\n" for i in ids)
    )
    (data / "data" / "test.csv").write_text("PassengerId,Age\n" + "".join(f"{100 + i},{30 + i}\n" for i in ids))
    (data / "data" / "ground_truth.csv").write_text(
        "PassengerId,Survived\n" + "".join(f"{100 + i},{i % 2}\n" for i in ids)
    )
    (data / "evaluate.py").write_text(EVALUATE_ABSOLUTE)
    (data / "baseline.py").write_text(
        "import pandas as pd\n"
        "t = pd.read_csv('/home/agent/workspace/data/test.csv')\n"
        "out = t.assign(Survived=0)[['PassengerId', 'Survived']]\n"
        "out.to_csv('/home/agent/workspace/submission.csv', index=False)\n"
    )
    _yaml(
        root / "configs" / "datasets" / "shipwreck.yaml",
        {
            "name": "Shipwreck",
            "description": "Passengers and whether they survived.",
            "data_path": "data/shipwreck/data",
            "is_local": True,
        },
    )
    _yaml(
        root / "configs" / "tasks" / "shipwreck.yaml",
        {
            "id": "titanicSurvival",
            "name": "Shipwreck survival",
            "description": "Predict survival. {dataset_docs} Braces like {this} stay as they are.",
            "dataset_configs": ["datasets/shipwreck.yaml"],
            "task_entrypoint": "CSVSubmissionTasks",
            "training_timeout": 120,
            "starter_code": ["data/shipwreck/evaluate.py", "data/shipwreck/baseline.py"],
            "baseline_paths": ["baseline.py"],
            "baseline_scores": [{"Accuracy": 0.5}],
            "evaluation_paths": ["evaluate.py"],
        },
    )
    for name, entry, body in [
        ("chatty", "CSVSubmissionTasks", "print('loading...')\nprint('{\"accuracy\": 1.0}')\n"),
        (
            "modelish",
            "ModelSubmissionTasks",
            "import sys\nprint('step 1')\nprint('{\"Reward Mean\": 7.5}')\nprint(sys.argv)\n",
        ),
        ("slow", "PythonSubmissionTasks", "import time\ntime.sleep(60)\n"),
        ("crashing", "PythonSubmissionTasks", "import sys\nsys.exit(3)\n"),
    ]:
        folder = root / "data" / name
        folder.mkdir(parents=True)
        (folder / "evaluate.py").write_text(body)
        _yaml(
            root / "configs" / "tasks" / f"{name}.yaml",
            {
                "id": name,
                "name": name,
                "description": f"The {name} task.",
                "task_entrypoint": entry,
                "training_timeout": 3 if name == "slow" else 60,
                "starter_code": [f"data/{name}/evaluate.py"],
                "evaluation_paths": ["evaluate.py"],
            },
        )
    return root


def _yaml(path: Path, data: dict) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


# Markers the synthetic validate/submit print, in the <<NAME||...||NAME>> shape MLGym's runtime looks for.
TOOLS_VALIDATE_MARKER = "<<VALIDATION||synthetic check||VALIDATION>>"
TOOLS_SUBMIT_MARKER = "<<SUBMISSION||synthetic submit||SUBMISSION>>"

# Written from scratch for these tests: a tiny viewer, a line-range editor fed on stdin, a script
# command, a helper script, a plain utility file, and validate/submit that print the markers above.
_TOOLS_VIEWER = """\
# A small file viewer (test fixture).
_show() {
    local last=$((CURRENT_LINE + WINDOW - 1))
    echo "== $CURRENT_FILE from line $CURRENT_LINE =="
    awk -v a="$CURRENT_LINE" -v b="$last" 'NR >= a && NR <= b { printf "%d|%s\\n", NR, $0 }' "$CURRENT_FILE"
}

# @yaml
# signature: open <path> [<line>]
# docstring: shows {WINDOW} lines of a file, from the given line on
# arguments:
#   path:
#     type: string
#     description: the file to show
#     required: true
#   line:
#     type: integer
#     description: the first line shown (1 if left out)
#     required: false
open() {
    if [ ! -f "$1" ]; then
        echo "no such file: $1"
        return 1
    fi
    export CURRENT_FILE=$(realpath "$1")
    export CURRENT_LINE=${2:-1}
    _show
}

# @yaml
# docstring: moves the view of the open file to start at a line
# arguments:
#   line:
#     type: integer
#     description: the line to start the view at
#     required: true

goto() {
    export CURRENT_LINE=$1
    _show
}
"""

_TOOLS_EDITOR = """\
# @yaml
# signature: |-
#   edit <first>:<last>
#   <new_lines>
#   end_of_edit
# docstring: puts new_lines in place of lines first..last of the open file
# end_name: end_of_edit
# arguments:
#   first:
#     type: integer
#     description: first line replaced
#     required: true
#   last:
#     type: integer
#     description: last line replaced
#     required: true
#   new_lines:
#     type: string
#     description: the lines put in their place
#     required: true
edit() {
    if [ -z "$CURRENT_FILE" ]; then
        echo "open a file first"
        return 1
    fi
    local first=${1%%:*} last=${1##*:} staged
    staged=$(mktemp)
    head -n $((first - 1)) "$CURRENT_FILE" > "$staged"
    cat >> "$staged"
    tail -n +$((last + 1)) "$CURRENT_FILE" >> "$staged"
    cat "$staged" > "$CURRENT_FILE"
    rm -f "$staged"
    echo "[$(_helper "$CURRENT_FILE") lines now]"
    _show
}
"""

_TOOLS_MARKS = f"""\
# @yaml
# docstring: scores the current submission; the episode goes on
validate() {{
    echo '{TOOLS_VALIDATE_MARKER}'
}}

# @yaml
# docstring: hands in the current submission and ends the episode
submit() {{
    echo '{TOOLS_SUBMIT_MARKER}'
}}
"""

_TOOLS_WORDCOUNT = """\
#!/usr/bin/env python3
# @yaml
# signature: wordcount <path>
# docstring: prints how many words a file holds
# arguments:
#   path:
#     type: string
#     description: the file to count
#     required: true
import sys

with open(sys.argv[1]) as handle:
    print("words:", len(handle.read().split()))
"""

_TOOLS_HELPER = """\
#!/usr/bin/env python3
# Prints how many lines a file has (used by the fixture's edit).
import sys

with open(sys.argv[1]) as handle:
    print(sum(1 for _ in handle))
"""

TOOLS_ENV = {
    "WINDOW": 3,
    "CURRENT_LINE": 0,
    "CURRENT_FILE": "",
    "SEARCH_RESULTS": "()",
    "TRICKY": 'it\'s "quoted" $HOME `date` ; echo no',
}


def write_mlgym_like_tools(root: Path) -> Path:
    """Synthetic MLGym-style command files plus configs/agents/default.yaml listing them."""
    tools = root / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "viewer.sh").write_text(_TOOLS_VIEWER)
    (tools / "editor.sh").write_text(_TOOLS_EDITOR)
    (tools / "marks.sh").write_text(_TOOLS_MARKS)
    (tools / "wordcount.py").write_text(_TOOLS_WORDCOUNT)
    (tools / "_helper.py").write_text(_TOOLS_HELPER)
    (tools / "_notes.txt").write_text("plain data a command could read\n")
    agents = root / "configs" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    _yaml(
        agents / "default.yaml",
        {
            "system_template": "You have these commands:\n{command_docs}",
            "output_parser": "SomeParser",
            "tools": {
                "env_variables": TOOLS_ENV,
                "command_files": [
                    "tools/viewer.sh",
                    "tools/editor.sh",
                    "tools/_helper.py",
                    "tools/wordcount.py",
                    "tools/_notes.txt",
                    "tools/marks.sh",
                ],
                "parser": "SomeDocParser",
                "state_command": {"name": "state", "code": "state() { echo '{}'; }"},
            },
        },
    )
    return root


def write_own_task(root: Path, name: str, entrypoint: str, files: dict[str, str], config: str) -> Path:
    """A task of ``entrypoint`` in an MLGym-like root at ``root`` (made if missing): ``files`` under
    data/<name>/, their top-level entries its starter code in the order given, evaluate.py its evaluation
    script, ``config`` further YAML lines. Returns the root."""
    if not (root / "configs" / "tasks").is_dir():
        write_mlgym_like_root(root)
    for rel, text in files.items():
        (root / "data" / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "data" / name / rel).write_text(text)
    starter = ", ".join(dict.fromkeys(f"data/{name}/{rel.split('/')[0]}" for rel in files))
    (root / "configs" / "tasks" / f"{name}.yaml").write_text(
        f"id: {name}\nname: {name}\ndescription: d\ntask_entrypoint: {entrypoint}\ntraining_timeout: 60\n"
        f"starter_code: [{starter}]\nevaluation_paths: [evaluate.py]\n{config}"
    )
    return root


# Own tasks the red-team tests use at two depths (tests/tasks/test_task_runtime.py: a workspace evaluated;
# test_red_team_task_checks.py: a rollout): (entrypoint, files, further YAML).
# A game that compares allocations with zip() and never checks their length (MLGym's blotto).
WRONG_LENGTH_TASK = (
    "PythonSubmissionTasks",
    {
        "strategy.py": "def allocate():\n    return [20] * 6\n",
        "evaluate.py": "import json\nfrom strategy import allocate\nmine = allocate()\nassert sum(mine) <= 120\n"
        "wins = sum(1 for a, b in zip(mine, [19, 19, 19, 21, 21, 21]) if a > b)\n"
        "print(json.dumps({'Score': wins / 6}))\n",
    },
    "baseline_scores: [{Score: 0.5}]\nreturn_lengths: {strategy.allocate: 6}\n",
)
# A model evaluator that imports the task's own package (src/) and, if it can, a library the image lacks.
MODEL_IMPORTS_TASK = (
    "ModelSubmissionTasks",
    {
        "evaluate.py": "import json\nfrom src.helpers import reward\ntry:\n    import gymnax_like\n"
        "    extra = gymnax_like.EXTRA\nexcept ImportError:\n    extra = 0.0\n"
        "print(json.dumps({'Reward Mean': reward() + extra}))\n",
        "src/__init__.py": "",
        "src/helpers.py": "def reward():\n    return 2.0\n",
    },
    "baseline_scores: [{Reward Mean: 2.0}]\n",
)
