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
