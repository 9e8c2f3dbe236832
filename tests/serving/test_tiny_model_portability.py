"""The tiny model reads with transformers 4.x whichever version wrote it: a rehearsal run from today's
prime-rl venv (transformers 5.x) writes the shared model that prime-rl c87c19b's trainer (4.57) loads.
Here the 5.x spellings are planted in a folder this venv wrote, and the folder must still load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from air.serving.models.tiny_model import readable_by_older_transformers


def test_a_folder_in_transformers_5_spellings_loads_after_the_rewrite(tiny_model_dir: Path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "written-by-5"
    shutil.copytree(tiny_model_dir, folder)
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["tokenizer_class"] = "TokenizersBackend"  # transformers 5's name for it
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    config = json.loads((folder / "config.json").read_text())
    theta = config.pop("rope_theta", 10000.0)
    config["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    (folder / "config.json").write_text(json.dumps(config))

    readable_by_older_transformers(folder)

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    reference = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tokenizer.encode("head -3 data/train.csv") == reference.encode("head -3 data/train.csv")
    assert model.config.rope_theta == theta
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    readable_by_older_transformers(folder)  # nothing more to change: left as it is
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
