"""``capeval score`` on the files a captioning researcher holds: COCO results and references, several systems in
one table (text, Markdown, CSV, JSON), per-image files of every metric and system."""

from __future__ import annotations

import csv
import io
import json

import pytest
from coco_files import (
    CAPTIONS,
    COCO_IDS,
    REFERENCES,
    write_coco_annotations,
    write_coco_results,
    write_images,
    write_karpathy,
)

import capeval
from capeval.cli import main

OTHER = {391895: "a dog on a beach", 42: "fruit", 522418: "a woman with a cake and a knife in a kitchen"}


@pytest.fixture()
def coco(tmp_path):
    write_images(tmp_path / "val2014", [f"COCO_val2014_{i:012d}.jpg" for i in COCO_IDS])
    write_coco_results(tmp_path / "blip.json", CAPTIONS)
    write_coco_results(tmp_path / "other.json", OTHER)
    write_coco_annotations(tmp_path / "captions_val2014.json", REFERENCES)
    write_karpathy(tmp_path / "dataset_coco.json", REFERENCES)
    return tmp_path


def _api(model, captions: dict, root):
    return capeval.RefCLIPScore(model=str(model))(
        [captions[i] for i in COCO_IDS],
        references=[REFERENCES[i] for i in COCO_IDS],
        images=[str(root / "val2014" / f"COCO_val2014_{i:012d}.jpg") for i in COCO_IDS],
    )


@pytest.mark.parametrize("references", ["captions_val2014.json", "dataset_coco.json"])
def test_coco_results_and_coco_references_score_as_the_api(coco, tiny_clip_dir, capsys, references):
    out = coco / "per.json"
    rc = main(
        [
            "score", str(coco / "blip.json"), str(coco / "val2014"), "--references-json", str(coco / references),
            "--model", str(tiny_clip_dir), "--save-per-instance", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    api = _api(tiny_clip_dir, CAPTIONS, coco)
    per = json.loads(out.read_text())
    assert list(per) == [str(i) for i in COCO_IDS]  # the results file's ids, in its order
    assert [per[str(i)]["RefCLIPScore"] for i in COCO_IDS] == pytest.approx(api["scores"], abs=1e-6)
    printed = capsys.readouterr().out
    assert f"RefCLIPScore: {api['refclipscore']:.4f}" in printed
    assert "signature: clipscore|" in printed and "signature: refclipscore|" in printed


def test_several_systems_print_one_row_each_with_their_corpus_scores(coco, tiny_clip_dir, capsys):
    out = coco / "per.json"
    rc = main(
        [
            "score", str(coco / "blip.json"), str(coco / "other.json"), str(coco / "val2014"),
            "--references-json", str(coco / "captions_val2014.json"), "--model", str(tiny_clip_dir),
            "--metrics", "clipscore", "refclipscore", "wmd", "--save-per-instance", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["system", "CLIPScore", "RefCLIPScore", "WMD"]
    wmd = {
        name: capeval.WMD()([c[i] for i in COCO_IDS], references=[REFERENCES[i] for i in COCO_IDS])
        for name, c in (("blip", CAPTIONS), ("other", OTHER))
    }
    for row, (name, captions) in zip(lines[1:3], (("blip", CAPTIONS), ("other", OTHER)), strict=True):
        api = _api(tiny_clip_dir, captions, coco)
        assert row.split() == [
            name, f"{api['clipscore']:.4f}", f"{api['refclipscore']:.4f}", f"{wmd[name]['wmd']:.4f}"
        ]  # fmt: skip
    assert [line.split("|")[0] for line in lines[3:6]] == [
        "signature: clipscore",
        "signature: refclipscore",
        "signature: wmd",
    ]
    per = json.loads(out.read_text())
    assert list(per) == ["blip", "other"]
    assert per["other"]["42"]["WMD"] == pytest.approx(wmd["other"]["scores"][1], abs=1e-9)


def test_json_markdown_and_csv_hold_the_same_table(coco, tiny_clip_dir, capsys):
    base = [
        "score", str(coco / "blip.json"), str(coco / "other.json"), "--image-dir", str(coco / "val2014"),
        "--references-json", str(coco / "captions_val2014.json"), "--model", str(tiny_clip_dir),
        "--metrics", "clipscore", "wembsim", "--format",
    ]  # fmt: skip
    assert main([*base, "json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["images"] == 3 and list(table["systems"]) == ["blip", "other"]
    assert table["metrics"]["WEmbSim"]["signature"].startswith("wembsim|")
    assert main([*base, "csv"]) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(captured.out)))
    assert [r["system"] for r in rows] == ["blip", "other"]
    assert float(rows[1]["CLIPScore"]) == pytest.approx(table["systems"]["other"]["CLIPScore"], abs=5e-5)
    assert "signature: clipscore|" in captured.err  # CSV on stdout stays a table
    assert main([*base, "markdown"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0] == "| system | CLIPScore | WEmbSim |" and md[1] == "|---|---:|---:|"
    assert md[3].startswith(f"| other | {table['systems']['other']['CLIPScore']:.4f} |")


def test_text_metrics_need_no_image_folder(coco, capsys):
    rc = main(
        [
            "score", str(coco / "blip.json"), str(coco / "other.json"),
            "--references-json", str(coco / "dataset_coco.json"), "--metrics", "wmd",
        ]
    )  # fmt: skip
    assert rc == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["system", "WMD"]


def test_an_unknown_or_unavailable_metric_is_one_line_before_any_work(coco, capsys):
    args = ["score", str(coco / "blip.json"), str(coco / "val2014"), "--model", str(coco / "no-model")]
    assert main([*args, "--metrics", "clipscore", "pacscore"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("capeval: error: cannot run pacscore: PAC-S needs the authors' weights")
    assert len(err.splitlines()) == 1
