"""``capeval score`` on the files a captioning researcher holds: COCO results and references, several systems in
one table (text, Markdown, CSV, JSON), per-image files of every metric and system."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from coco_files import (
    CAPTIONS,
    COCO_IDS,
    REF_CLIP_S,
    REF_CLIP_S_SCORES,
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
            name, f"{api[REF_CLIP_S]:.4f}", f"{api['refclipscore']:.4f}", f"{wmd[name]['wmd']:.4f}"
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
    # Both are named in one line: the model folder does not exist, and PAC-S has no weights.
    assert err.startswith("capeval: error: cannot run clipscore: model ")
    assert "; pacscore: PAC-S needs the authors' weights" in err
    assert len(err.splitlines()) == 1


def test_compare_adds_each_metrics_delta_to_the_baseline_with_its_interval_and_p(coco, tiny_clip_dir, capsys):
    rc = main(
        [
            "score", str(coco / "blip.json"), str(coco / "other.json"), str(coco / "val2014"),
            "--references-json", str(coco / "captions_val2014.json"), "--model", str(tiny_clip_dir),
            "--metrics", "clipscore", "wmd", "bleu4", "--baseline", "blip", "--format", "json",
        ]
    )  # fmt: skip
    assert rc == 0
    table = json.loads(capsys.readouterr().out)
    refs = [REFERENCES[i] for i in COCO_IDS]
    wmd = {
        n: capeval.WMD()([c[i] for i in COCO_IDS], references=refs)["scores"]
        for n, c in (("blip", CAPTIONS), ("other", OTHER))
    }
    # The paired test of the per-image scores the metric gives alone (delta = other - blip).
    expected = capeval.compare(wmd["other"], wmd["blip"], names=("other", "blip"), metric="WMD")
    got = table["comparisons"]["other"]["WMD"]
    assert got["delta"] == pytest.approx(np.mean(wmd["other"]) - np.mean(wmd["blip"]), abs=1e-9)
    assert (got["p_value"], got["ci_low"], got["ci_high"]) == pytest.approx(
        (expected.p_value, expected.ci_low, expected.ci_high), abs=1e-9
    )
    assert got["exact"] is True and got["n"] == 3  # 2^3 assignments enumerated
    clip_per = {
        n: _api(tiny_clip_dir, c, coco)[REF_CLIP_S_SCORES] for n, c in (("blip", CAPTIONS), ("other", OTHER))
    }
    assert table["comparisons"]["other"]["CLIPScore"]["delta"] == pytest.approx(
        np.mean(clip_per["other"]) - np.mean(clip_per["blip"]), abs=1e-6
    )
    # BLEU's corpus score is not a mean of per-image scores: left out, and said so.
    assert "BLEU-4" not in table["comparisons"]["other"]
    assert table["notes"][0].startswith("not compared: BLEU-4")


def test_per_image_bleu_is_named_sentence_bleu_apart_from_the_corpus_bleu_of_the_table(coco, capsys):
    from capeval.scoring.baselines import CocoBaseline

    out = coco / "per.json"
    rc = main(
        [
            "score", str(coco / "blip.json"), "--references-json", str(coco / "captions_val2014.json"),
            "--metrics", "bleu4", "meteor", "--save-per-instance", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr().out.splitlines()
    refs = [REFERENCES[i] for i in COCO_IDS]
    corpus, sentence = CocoBaseline("bleu4").corpus_score([CAPTIONS[i] for i in COCO_IDS], refs)
    assert printed[0] == f"BLEU-4: {corpus:.4f}"  # pycocoevalcap's corpus BLEU, as its COCOEvalCap prints it
    per = json.loads(out.read_text())
    assert list(per[str(COCO_IDS[0])]) == ["sentence BLEU-4", "sentence METEOR"]
    assert [per[str(i)]["sentence BLEU-4"] for i in COCO_IDS] == pytest.approx(sentence, abs=1e-12)
    assert f"{np.mean(sentence):.4f}" != f"{corpus:.4f}"  # two numbers, so two names


def test_compare_in_text_prints_a_second_table_of_differences(coco, capsys):
    rc = main(
        [
            "score", str(coco / "blip.json"), str(coco / "other.json"), "--references-json",
            str(coco / "captions_val2014.json"), "--metrics", "wmd", "wembsim", "--compare", "--correction", "holm",
        ]
    )  # fmt: skip
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[4].split() == ["system", "metric", "delta", "vs", "blip", "95%", "CI", "p"]
    assert [line.split()[:2] for line in lines[5:7]] == [["other", "WMD"], ["other", "WEmbSim"]]
    assert lines[5].endswith("(Holm)")
    assert lines[-1].startswith(
        "compared with blip: delta = system - blip per metric, two-sided p, exact paired"
    )


def test_a_baseline_that_is_not_a_system_is_refused_before_scoring(coco, tmp_path):
    args = ["score", str(coco / "blip.json"), str(coco / "other.json"), str(coco / "val2014")]
    with pytest.raises(SystemExit, match=r"a baseline among them; the systems are \['blip', 'other'\]"):
        main([*args, "--model", str(tmp_path / "no-model"), "--baseline", "git"])
    with pytest.raises(SystemExit, match="need two or more systems"):
        main(["score", str(coco / "blip.json"), str(coco / "val2014"), "--compare"])
