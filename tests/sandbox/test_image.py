"""The sandbox image: recipe hash, tag, base selection, build errors, CLI, and (docker) its contents."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from air.cli.main import main
from air.sandbox.image import base, build, recipe

REPO_RECIPE = Path(__file__).resolve().parents[2] / "docker"


# --------------------------------------------------------------------------- recipe hash


@pytest.fixture
def recipe_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "recipe"
    shutil.copytree(REPO_RECIPE, dest)
    return dest


def test_repo_recipe_is_found_and_has_a_dockerfile():
    assert recipe.find_recipe_dir() == REPO_RECIPE
    assert (REPO_RECIPE / "Dockerfile").is_file()


def test_hash_is_short_hex_and_stable():
    first = recipe.recipe_hash()
    assert len(first) == recipe.HASH_LENGTH
    int(first, 16)
    assert recipe.recipe_hash() == first
    assert recipe.recipe_hash(REPO_RECIPE) == first


def test_hash_depends_on_content_not_location(recipe_copy: Path):
    assert recipe.recipe_hash(recipe_copy) == recipe.recipe_hash()


def test_hash_changes_when_the_dockerfile_changes(recipe_copy: Path):
    before = recipe.recipe_hash(recipe_copy)
    dockerfile = recipe_copy / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\n# tweak\n")
    assert recipe.recipe_hash(recipe_copy) != before


def test_hash_changes_when_a_helper_file_is_added_or_renamed(recipe_copy: Path):
    before = recipe.recipe_hash(recipe_copy)
    helper = recipe_copy / "helpers" / "setup.sh"
    helper.parent.mkdir()
    helper.write_text("echo hi\n")
    added = recipe.recipe_hash(recipe_copy)
    assert added != before
    helper.rename(helper.with_name("other.sh"))
    assert recipe.recipe_hash(recipe_copy) not in (before, added)


def test_hash_ignores_editor_and_bytecode_junk(recipe_copy: Path):
    before = recipe.recipe_hash(recipe_copy)
    (recipe_copy / "Dockerfile~").write_text("backup")
    (recipe_copy / "__pycache__").mkdir()
    (recipe_copy / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert recipe.recipe_hash(recipe_copy) == before


def test_default_tag_names_the_repository_and_hash():
    assert recipe.default_image_tag() == f"{recipe.image_repository()}:{recipe.recipe_hash()}"
    assert recipe.image_repository() == "air-sandbox"


def test_dockerfile_declares_the_default_base():
    assert recipe.dockerfile_default_base() == "debian:bookworm-slim"


def test_missing_recipe_names_every_place_looked(tmp_path: Path):
    places = [tmp_path / "air" / "_docker", tmp_path / "docker"]
    (tmp_path / "docker").mkdir()  # a folder without a Dockerfile (e.g. the docker SDK package) does not count
    with pytest.raises(recipe.RecipeNotFoundError) as info:
        recipe.find_recipe_dir(places)
    assert str(places[0]) in str(info.value) and str(places[1]) in str(info.value)


def test_wheel_location_is_tried_before_the_checkout():
    candidates = recipe.recipe_dir_candidates()
    assert candidates[0].name == "_docker" and candidates[0].parent.name == "air"
    assert candidates[1] == REPO_RECIPE


def test_build_context_holds_exactly_the_hashed_files(recipe_copy: Path):
    import tarfile

    (recipe_copy / "notes.txt").write_text("x")
    with tarfile.open(fileobj=recipe.build_context(recipe_copy)) as tar:
        names = sorted(tar.getnames())
    assert names == [rel for rel, _ in recipe.recipe_files(recipe_copy)]
    assert "Dockerfile" in names


# --------------------------------------------------------------------------- base selection (fake engine)


class _FakeImages:
    def __init__(self, present: set[str]):
        self.present = present

    def get(self, ref: str):
        from docker.errors import ImageNotFound

        if ref not in self.present:
            raise ImageNotFound(ref)
        return object()


class _FakeAPI:
    def __init__(self, images: _FakeImages, pull_ok: bool, build_events: list[dict] | None = None):
        self.images, self.pull_ok, self.build_events = images, pull_ok, build_events or []
        self.pulled: list[str] = []
        self.build_kwargs: dict | None = None

    def pull(self, repo, tag=None, stream=False, decode=False):
        from docker.errors import APIError

        self.pulled.append(f"{repo}:{tag}")
        if not self.pull_ok:
            raise APIError("no such host")
        self.images.present.add(f"{repo}:{tag}")
        return iter([{"status": "Downloaded"}])

    def build(self, **kwargs):
        self.build_kwargs = kwargs
        ok = not any("error" in e for e in self.build_events)
        if ok:
            self.images.present.add(kwargs["tag"])
        return iter(self.build_events)


class _FakeClient:
    def __init__(self, present=(), pull_ok=False, build_events=None):
        self.images = _FakeImages(set(present))
        self.api = _FakeAPI(self.images, pull_ok, build_events)


@pytest.fixture
def no_debootstrap(monkeypatch):
    calls = []

    def fake(client, progress=None, rebuild=False):
        calls.append(client)
        client.images.present.add(recipe.DEBOOTSTRAP_BASE_IMAGE)
        return recipe.DEBOOTSTRAP_BASE_IMAGE

    monkeypatch.setattr(base, "ensure_debootstrap_base", fake)
    return calls


def test_auto_uses_a_local_registry_base_without_pulling(no_debootstrap):
    client = _FakeClient(present={"debian:bookworm-slim"})
    assert base.resolve_base(client, "auto") == "debian:bookworm-slim"
    assert client.api.pulled == [] and no_debootstrap == []


def test_auto_reuses_an_imported_debootstrap_base_before_pulling(no_debootstrap):
    client = _FakeClient(present={recipe.DEBOOTSTRAP_BASE_IMAGE})
    assert base.resolve_base(client, "auto") == recipe.DEBOOTSTRAP_BASE_IMAGE
    assert client.api.pulled == []


def test_auto_pulls_when_nothing_is_local(no_debootstrap):
    client = _FakeClient(pull_ok=True)
    assert base.resolve_base(client, "auto") == "debian:bookworm-slim"
    assert client.api.pulled == ["debian:bookworm-slim"] and no_debootstrap == []


def test_auto_falls_back_to_debootstrap_when_the_pull_fails(no_debootstrap):
    client = _FakeClient(pull_ok=False)
    assert base.resolve_base(client, "auto") == recipe.DEBOOTSTRAP_BASE_IMAGE
    assert client.api.pulled == ["debian:bookworm-slim"] and len(no_debootstrap) == 1


def test_registry_mode_never_debootstraps(no_debootstrap):
    with pytest.raises(recipe.BaseImageError, match="no such host"):
        base.resolve_base(_FakeClient(pull_ok=False), "registry")
    assert no_debootstrap == []


def test_auto_reports_both_failures(monkeypatch):
    monkeypatch.setattr(base, "debootstrap_problem", lambda: "debootstrap is not installed")
    with pytest.raises(recipe.BaseImageError) as info:
        base.resolve_base(_FakeClient(pull_ok=False), "auto")
    assert "no such host" in str(info.value) and "debootstrap is not installed" in str(info.value)


def test_build_is_skipped_when_the_tag_exists():
    client = _FakeClient(present={recipe.default_image_tag()})
    result = build.build_image(client=client, progress=False)
    assert result == build.BuildResult(tag=recipe.default_image_tag(), built=False, seconds=result.seconds)
    assert client.api.build_kwargs is None


def test_build_passes_base_arg_and_labels(no_debootstrap):
    client = _FakeClient(build_events=[{"stream": "Step 1/2 : FROM x\n"}, {"aux": {"ID": "sha256:abc"}}])
    result = build.build_image(client=client, progress=False)
    kwargs = client.api.build_kwargs
    assert result.built and result.image_id == "sha256:abc" and result.base_image == recipe.DEBOOTSTRAP_BASE_IMAGE
    assert kwargs["buildargs"] == {"BASE_IMAGE": recipe.DEBOOTSTRAP_BASE_IMAGE}
    assert kwargs["labels"][recipe.RECIPE_LABEL] == recipe.recipe_hash()
    assert kwargs["tag"] == recipe.default_image_tag() and kwargs["nocache"] is False


def test_build_error_names_the_failing_step_and_log_tail(no_debootstrap):
    events = [
        {"stream": "Step 1/3 : FROM base\n"},
        {"stream": "Step 2/3 : RUN apt-get install nothing\n"},
        {"stream": "E: Unable to locate package nothing\n"},
        {"error": "The command returned a non-zero code: 100", "errorDetail": {"message": "returned 100"}},
    ]
    with pytest.raises(recipe.ImageBuildError) as info:
        build.build_image(client=_FakeClient(build_events=events), progress=False)
    message = str(info.value)
    assert "Step 2/3 : RUN apt-get install nothing" in message
    assert "returned 100" in message and "Unable to locate package nothing" in message


def test_split_reference():
    assert base._split_reference("debian:bookworm-slim") == ("debian", "bookworm-slim")
    assert base._split_reference("localhost:5000/debian") == ("localhost:5000/debian", "latest")
    assert base._split_reference("localhost:5000/debian:12") == ("localhost:5000/debian", "12")


# --------------------------------------------------------------------------- CLI


def test_cli_tag_only_prints_the_tag_without_docker(monkeypatch, capsys):
    def no_engine():
        raise AssertionError("--tag-only must not contact Docker")

    monkeypatch.setattr(build, "get_client", no_engine)
    assert main(["build-image", "--tag-only"]) == 0
    out = capsys.readouterr().out
    assert out == recipe.default_image_tag() + "\n"


def test_cli_reports_an_unreachable_engine_in_one_line(monkeypatch, capsys):
    def no_engine():
        raise recipe.DockerUnavailableError("Cannot reach the Docker engine at unix:///nowhere")

    monkeypatch.setattr(build, "get_client", no_engine)
    assert main(["build-image"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("air: error: Cannot reach the Docker engine") and "Traceback" not in err


def test_cli_without_a_command_prints_help(capsys):
    assert main([]) == 2
    assert "build-image" in capsys.readouterr().err


# --------------------------------------------------------------------------- the built image (docker)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str):
    """Skip on a user's machine; fail in CI, where the engine and image must be there."""
    if _in_ci():
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def docker_client():
    try:
        return base.get_client()
    except recipe.DockerUnavailableError as exc:
        _unavailable(str(exc))


@pytest.fixture(scope="module")
def sandbox_tag(docker_client) -> str:
    tag = recipe.default_image_tag()
    if not base.image_exists(docker_client, tag):
        _unavailable(f"image {tag} is missing; build it with `uv run air build-image`")
    return tag


@pytest.fixture(scope="module")
def sandbox(docker_client, sandbox_tag):
    """One container from the image for the whole module; checks exec into it."""
    container = docker_client.containers.run(
        sandbox_tag, ["sleep", "infinity"], detach=True, network_disabled=True, labels={"air.test": "1"}
    )
    try:
        yield container
    finally:
        container.remove(force=True)


def _sh(container, script: str) -> tuple[int, str]:
    code, output = container.exec_run(["bash", "-c", script])
    return code, output.decode(errors="replace").strip()


@pytest.mark.docker
def test_image_defaults_to_agent_in_the_workspace(docker_client, sandbox_tag):
    output = docker_client.containers.run(
        sandbox_tag, ["bash", "-c", "id -un; id -u; pwd"], remove=True, network_disabled=True
    )
    assert output.decode().split() == ["agent", "1000", "/home/agent/workspace"]


@pytest.mark.docker
def test_image_is_labelled_with_its_recipe(docker_client, sandbox_tag):
    labels = docker_client.images.get(sandbox_tag).labels
    assert labels[recipe.RECIPE_LABEL] == recipe.recipe_hash()


@pytest.mark.docker
def test_workspace_is_owned_and_writable_by_agent(sandbox):
    code, out = _sh(sandbox, "stat -c '%U:%G' /home/agent/workspace && touch probe && echo ok")
    assert code == 0, out
    assert out.splitlines() == ["agent:agent", "ok"]


@pytest.mark.docker
def test_python_has_the_ml_stack(sandbox):
    code, out = _sh(
        sandbox,
        "python -c \"import numpy, pandas, sklearn; print('ok')\" && python --version",
    )
    assert code == 0, out
    assert out.splitlines()[0] == "ok" and out.splitlines()[1].startswith("Python 3.")


@pytest.mark.docker
def test_sklearn_fits_a_model(sandbox):
    script = (
        "from sklearn.datasets import make_classification\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "import pandas as pd\n"
        "X, y = make_classification(200, random_state=0)\n"
        "print(LogisticRegression().fit(pd.DataFrame(X), y).score(X, y) > 0.8)\n"
    )
    code, out = sandbox.exec_run(["python", "-c", script])
    assert code == 0, out.decode()
    assert out.decode().strip() == "True"


@pytest.mark.docker
@pytest.mark.parametrize("tool", ["jq", "file", "flake8", "ps", "bash", "python3"])
def test_tool_is_installed(sandbox, tool):
    code, out = _sh(sandbox, f"command -v {tool}")
    assert code == 0, f"{tool} not found: {out}"


@pytest.mark.docker
def test_tools_run(sandbox):
    code, out = _sh(sandbox, "echo '{\"a\": 1}' | jq .a && file /bin/bash | cut -d: -f1 && flake8 --version >/dev/null")
    assert code == 0, out
    assert out.splitlines() == ["1", "/bin/bash"]
