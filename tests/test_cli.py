"""The capeval score command in the CLIPScore authors' layout."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.cli import main


@pytest.fixture()
def example(tmp_path):
    img_dir = tmp_path / "images"
    img_dir.mkdir()
    rng = np.random.RandomState(0)
    for i in range(4):
        Image.fromarray(rng.randint(0, 256, (48, 64, 3), dtype=np.uint8)).save(img_dir / f"im{i}.png")
    cands = {f"im{i}": f"a caption number {i}" for i in range(4)}
    refs = {f"im{i}": [f"reference {i}", "another reference"] for i in range(4)}
    (tmp_path / "cands.json").write_text(json.dumps(cands))
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    return tmp_path, cands, refs


def test_score_writes_per_image_scores_equal_to_the_api(example, tiny_clip_dir, capsys):
    root, cands, refs = example
    out = root / "out" / "scores.json"
    rc = main(
        [
            "score", str(root / "cands.json"), str(root / "images"), "--references-json", str(root / "refs.json"),
            "--model", str(tiny_clip_dir), "--save-per-instance", str(out), "--batch-size", "3",
        ]
    )  # fmt: skip
    assert rc == 0
    per = json.loads(out.read_text())
    ids = sorted(cands)
    api = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        [cands[i] for i in ids],
        references=[refs[i] for i in ids],
        images=[str(root / "images" / f"{i}.png") for i in ids],
    )
    assert [per[i]["RefCLIPScore"] for i in ids] == pytest.approx(api["scores"], abs=1e-6)
    assert [per[i]["CLIPScore"] for i in ids] == pytest.approx(api["clip_s_scores"], abs=1e-6)
    printed = capsys.readouterr().out
    assert f"RefCLIPScore: {api['refclipscore']:.4f}" in printed
    assert "signature: refclipscore|" in printed


def test_score_without_references_gives_clipscore_only(example, tiny_clip_dir, capsys):
    root, _, _ = example
    assert main(["score", str(root / "cands.json"), str(root / "images"), "--model", str(tiny_clip_dir)]) == 0
    printed = capsys.readouterr().out
    assert "CLIPScore: " in printed and "RefCLIPScore" not in printed


def test_a_candidate_without_an_image_is_named(example, tiny_clip_dir):
    root, cands, _ = example
    cands["ghost"] = "a caption with no image"
    (root / "cands.json").write_text(json.dumps(cands))
    with pytest.raises(SystemExit, match=r"1 candidate id\(s\) have no image.*ghost"):
        main(["score", str(root / "cands.json"), str(root / "images"), "--model", str(tiny_clip_dir)])


def test_an_empty_caption_is_a_one_line_error_naming_the_item(example, tiny_clip_dir, capsys):
    root, cands, _ = example
    cands["im2"] = ""
    (root / "cands.json").write_text(json.dumps(cands))
    rc = main(["score", str(root / "cands.json"), str(root / "images"), "--model", str(tiny_clip_dir)])
    assert rc == 2
    assert "capeval: error: prediction 2 is an empty caption" in capsys.readouterr().err


def test_the_console_script_runs(example, tiny_clip_dir):
    root, _, _ = example
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "capeval.cli",
            "score",
            str(root / "cands.json"),
            str(root / "images"),
            "--model",
            str(tiny_clip_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CLIPScore: ")


def test_checkpoint_scores_pac_s_and_ref_pac_s(example, tiny_clip_dir, capsys):
    root, cands, refs = example
    out = root / "pacs.json"
    rc = main(
        [
            "score", str(root / "cands.json"), str(root / "images"), "--references-json", str(root / "refs.json"),
            "--checkpoint", str(tiny_clip_dir), "--save-per-instance", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    ids = sorted(cands)
    api = capeval.PACScore(checkpoint=str(tiny_clip_dir))(
        [cands[i] for i in ids],
        references=[refs[i] for i in ids],
        images=[str(root / "images" / f"{i}.png") for i in ids],
    )
    per = json.loads(out.read_text())
    assert [per[i]["PAC-S"] for i in ids] == pytest.approx(api["scores"], abs=1e-6)
    assert [per[i]["RefPAC-S"] for i in ids] == pytest.approx(api["refpacscore_scores"], abs=1e-6)
    printed = capsys.readouterr().out
    assert f"PAC-S: {api['pacscore']:.4f}" in printed and "RefPAC-S: " in printed
    assert "signature: pacscore|" in printed
