"""Publishing the Spaces: the dry run writes the exact folders, which evaluate loads and whose apps build.

The upload itself is checked against a stand-in for ``huggingface_hub.HfApi`` (no network here).
"""

from __future__ import annotations

import importlib.util
import json
import runpy
from pathlib import Path

import evaluate
import gradio as gr
import pytest

from capeval.integrations.hub import front_matter, parse_variables, push_spaces, requirement, stage_space
from capeval.registry import METRICS
from capeval_dev.perf.module_loading import child_env, example_inputs, load_in_fresh_process


def _push_script(repo_root):
    spec = importlib.util.spec_from_file_location("push_to_hub", repo_root / "scripts" / "push_to_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def staged(tmp_path_factory, repo_root):
    out = tmp_path_factory.mktemp("spaces")
    assert _push_script(repo_root).main(["my-org", "--dry-run", str(out)]) == 0
    return out


def test_dry_run_writes_one_space_folder_per_metric_with_module_card_app_and_pinned_requirements(staged):
    for metric in METRICS:
        folder = staged / metric
        names = sorted(p.name for p in folder.iterdir())
        assert {"README.md", "app.py", f"{metric}.py", "requirements.txt"} <= set(names), names
        assert not any(n.endswith((".pyc", ".pyi")) or n == "__pycache__" for n in names)
        fields = front_matter(folder / "README.md")
        assert fields["sdk"] == "gradio" and fields["app_file"] == "app.py"
        lines = [
            ln for ln in (folder / "requirements.txt").read_text().splitlines() if not ln.startswith("#")
        ]
        assert lines[0] == "capeval[spaces]==0.2.0"
        assert not any(ln.startswith("capeval") for ln in lines[1:])


def test_staged_folders_load_with_evaluate_and_score(staged, tiny_clip_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    for metric in METRICS:
        module = evaluate.load(str(staged / metric))
        assert isinstance(module, evaluate.Metric) and "predictions" in module.features, metric
    clip = evaluate.load(str(staged / "clipscore"))
    from PIL import Image

    out = clip.compute(
        predictions=["a red square"], images=[Image.new("RGB", (40, 40))], model=str(tiny_clip_dir)
    )
    assert set(out) == {"clipscore", "scores", "signature"}
    wmd = evaluate.load(str(staged / "wmd"))
    out = wmd.compute(predictions=["a man rides a horse"], references=[["a person riding a horse"]])
    assert 0 < out["wmd"] <= 1


@pytest.mark.slow  # a fresh process loading and computing all six (the word vectors twice): about 60 s
def test_each_staged_folder_loads_in_a_fresh_process_and_computes_what_the_repo_module_computes(
    staged, repo_root, tmp_path
):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    targets = [str(staged / metric) for metric in METRICS]
    env = child_env("offline", None, tmp_path / "modules", tmp_path / "home")
    out = load_in_fresh_process(targets, env, cwd, compute=targets)
    for metric, target in zip(METRICS, targets, strict=True):
        # evaluate records beside the imported copy where it came from: the staged folder, not the repository.
        record = json.loads(Path(out[target]["file"]).with_suffix(".json").read_text())
        assert Path(record["original file path"]).parent == staged / metric
        inputs = example_inputs(metric)
        repo = evaluate.load(str(repo_root / "metrics" / metric)).compute(**inputs)
        assert out[target]["result"] == json.loads(json.dumps(repo)), metric
        assert out[target]["result"]["scores"], metric


def test_staged_app_builds_its_demo_with_its_own_card(staged, tiny_clip_dir, monkeypatch):
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    card = staged / "clipscore" / "README.md"
    card.write_text(card.read_text() + "\nMARKER-OF-THE-STAGED-CARD\n")
    demo = runpy.run_path(str(staged / "clipscore" / "app.py"), run_name="space")["demo"]
    assert isinstance(demo, gr.Blocks)
    texts = [getattr(b, "value", None) for b in demo.blocks.values() if isinstance(b, gr.Markdown)]
    assert any(isinstance(t, str) and "MARKER-OF-THE-STAGED-CARD" in t for t in texts)
    assert not any(isinstance(t, str) and t.startswith("---") for t in texts)  # front matter not shown


def test_requirement_pins_a_release_or_a_commit():
    assert requirement() == "capeval[spaces]==0.2.0"
    assert requirement(version="0.2.0") == "capeval[spaces]==0.2.0"
    assert requirement(commit="0123abc") == "capeval[spaces] @ git+https://github.com/capeval/capeval@0123abc"
    with pytest.raises(ValueError, match="not a git commit"):
        requirement(commit="x; rm -rf /")
    with pytest.raises(ValueError, match="not a release"):
        requirement(version="1.0 --index-url http://evil")


class FakeHfApi:
    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def add_space_variable(self, repo_id, key, value):
        self.calls.append(("variable", repo_id, {key: value}))

    def upload_folder(self, **kwargs):
        files = sorted(p.name for p in __import__("pathlib").Path(kwargs["folder_path"]).iterdir())
        self.calls.append(("upload", kwargs["repo_id"], {**kwargs, "files": files}))


def test_push_creates_or_updates_each_space_and_uploads_the_staged_folder(tmp_path):
    api = FakeHfApi()
    pin = requirement(commit="0123abc")
    published = push_spaces(
        "my-org",
        tmp_path,
        pin,
        metrics=["clipscore", "pacscore"],
        variables=parse_variables(["CAPEVAL_DEMO_CHECKPOINT=my-org/pacs"]),
        api=api,
    )
    assert [p.repo_id for p in published] == ["my-org/clipscore", "my-org/pacscore"]
    assert published[0].url == "https://huggingface.co/spaces/my-org/clipscore"
    creates = [c for c in api.calls if c[0] == "create_repo"]
    assert all(
        c[2]["repo_type"] == "space" and c[2]["space_sdk"] == "gradio" and c[2]["exist_ok"] for c in creates
    )
    uploads = [c for c in api.calls if c[0] == "upload"]
    assert uploads[1][2]["files"] == ["README.md", "app.py", "pacscore.py", "requirements.txt"]
    assert uploads[1][2]["folder_path"] == str(tmp_path / "pacscore")
    assert pin in (tmp_path / "pacscore" / "requirements.txt").read_text()
    assert ("variable", "my-org/pacscore", {"CAPEVAL_DEMO_CHECKPOINT": "my-org/pacs"}) in api.calls


def test_bad_organisation_metric_or_variable_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a Hub user or organisation"):
        push_spaces("../evil", tmp_path, requirement(), dry_run=True)
    with pytest.raises(ValueError, match="unknown metric"):
        push_spaces("org", tmp_path, requirement(), metrics=["bleu"], dry_run=True)
    with pytest.raises(ValueError, match="KEY=value"):
        parse_variables(["NOEQUALS"])


def test_a_card_without_space_front_matter_is_refused(tmp_path, monkeypatch):
    import capeval.integrations.hub as publish

    module = tmp_path / "clipscore"
    module.mkdir()
    (module / "clipscore.py").write_text("")
    (module / "README.md").write_text("# no front matter\n")
    monkeypatch.setattr(publish, "module_path", lambda name: module)
    with pytest.raises(ValueError, match="needs 'sdk: gradio'"):
        stage_space("clipscore", tmp_path / "out", requirement())
