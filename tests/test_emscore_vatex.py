"""EMScore on the real VATEX-EVAL text files (reference-only: no videos are distributed with them)."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np

from capeval.bench import load_vatex_eval, vatex_eval_correlation, vatex_references
from capeval.emscore import EMScore


def _script(repo_root):
    spec = importlib.util.spec_from_file_location("emscore_vatex", repo_root / "scripts" / "emscore_vatex.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_only_emscore_runs_the_vatex_eval_protocol(benchmarks_dir, tiny_clip_dir):
    ds = load_vatex_eval(benchmarks_dir / "vatex_eval").select(range(120))
    nine = EMScore(model=str(tiny_clip_dir), device="cpu")(
        ds["candidate"], references=vatex_references(ds["references"], 9)
    )
    assert nine["variant"] == "EMScore(X,X*)" and "idf=references" in nine["signature"]
    corr = vatex_eval_correlation(nine["scores"], ds["human_scores"])
    assert math.isfinite(corr["kendall"]) and len(corr["kendall_per_annotator"]) == 3
    # With fixed weights (the IDF depends on the references given), more references can only raise each part.
    flat = EMScore(model=str(tiny_clip_dir), device="cpu", idf=False)
    one = flat(ds["candidate"], references=vatex_references(ds["references"], 1))
    nine = flat(ds["candidate"], references=vatex_references(ds["references"], 9))
    for key in ("figr_P", "figr_R", "figr_F", "cogr"):
        assert np.all(
            np.array(nine["details"]["EMScore(X,X*)"][key])
            >= np.array(one["details"]["EMScore(X,X*)"][key]) - 1e-6
        )


def test_the_vatex_script_prints_the_table_and_skips_no_reference_without_videos(
    benchmarks_dir, tiny_clip_dir, repo_root, tmp_path, capsys
):
    out_json = tmp_path / "rows.json"
    code = _script(repo_root).main(
        ["--data", str(benchmarks_dir / "vatex_eval"), "--model", str(tiny_clip_dir), "--limit", "60",
         "--refs", "0", "1", "--json", str(out_json), "--device", "cpu"]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    assert "| 1 | EMScore(X,X*) | full_F |" in captured.out
    assert "0 refs: needs --video-root or --video-feats" in captured.err
    rows = json.loads(out_json.read_text())
    assert [(r["refs"], r["variant"]) for r in rows] == [(1, "EMScore(X,X*)")]
