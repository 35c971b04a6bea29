"""PAC-S fine-tuning end to end, offline, on the drawn-shapes world.

Real pairs are drawings with their canonical captions; the "generated" positives are re-drawn variants
(other canvas, size, jitter, background) and paraphrases. Training must lower the validation loss and
raise held-out caption-ranking accuracy (top-1 among the 75 scenes' captions) over the starting model.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from capeval.training import PACSTrainConfig, info_nce, pacs_loss, train_pacs
from capeval.training.shapes_data import (
    caption_ranking_accuracy,
    held_out_scenes,
    random_start_clip,
    shapes_clip_without_projections,
    shapes_pacs_dataset,
)

pytestmark = pytest.mark.usefixtures("fresh_backbones")  # no backbone loaded by another test is reused

FAST = dict(
    batch_size=64, eval_every=50, patience=300, lr=1e-3
)  # small-data settings; the rest are the paper's


@pytest.fixture(scope="module")
def data():
    return shapes_pacs_dataset(600, seed=1), shapes_pacs_dataset(150, seed=2), held_out_scenes(150)


@pytest.fixture(scope="module")
def random_clip(tmp_path_factory):
    """A random tiny CLIP: room to improve everywhere (about 1/75 held-out top-1)."""
    return random_start_clip(tmp_path_factory.mktemp("start"), seed=0)


def test_info_nce_is_clips_symmetric_cross_entropy():
    torch.manual_seed(0)
    v, t = F.normalize(torch.randn(5, 8), dim=-1), F.normalize(torch.randn(5, 8), dim=-1)
    logits = 10.0 * v @ t.t()
    by_hand = 0.0
    for i in range(5):
        by_hand -= 0.5 * (logits[i, i] - torch.logsumexp(logits[i], 0)) / 5
        by_hand -= 0.5 * (logits[i, i] - torch.logsumexp(logits[:, i], 0)) / 5
    assert info_nce(v, t, torch.tensor(10.0)).item() == pytest.approx(by_hand.item(), abs=1e-6)


def test_pacs_loss_weights_the_generated_terms_by_the_lambdas():
    torch.manual_seed(0)
    vis, txt = torch.nn.Linear(6, 4, bias=False), torch.nn.Linear(5, 4, bias=False)
    feats = {"image": torch.randn(8, 6), "caption": torch.randn(8, 5)}
    feats |= {"generated_image": torch.randn(8, 6), "generated_caption": torch.randn(8, 5)}
    scale = torch.tensor(20.0)
    loss, parts = pacs_loss(vis, txt, feats, scale, lambda_v=0.05, lambda_t=0.1)
    assert loss.item() == pytest.approx(
        parts["real"] + 0.05 * parts["gen_image"] + 0.1 * parts["gen_caption"], rel=1e-6
    )
    v = F.normalize(vis(feats["generated_image"]), dim=-1)
    assert parts["gen_image"] == pytest.approx(
        info_nce(v, F.normalize(txt(feats["caption"]), dim=-1), scale).item()
    )


def test_defaults_are_the_papers():
    cfg = PACSTrainConfig()
    assert (cfg.lambda_v, cfg.lambda_t, cfg.lr, cfg.batch_size, cfg.patience) == (0.05, 0.1, 1e-4, 256, 1500)


def _train_and_measure(start, data, tmp_path, cfg, label):
    train, val, (images, scenes) = data
    before = caption_ranking_accuracy(start, images, scenes)
    result = train_pacs(str(start), train, val, tmp_path / "run", cfg, progress=False, num_threads=1)
    after = caption_ranking_accuracy(result.output, images, scenes)
    print(
        f"\n{label} -> PAC-S: val loss {result.initial_val_loss:.4f} -> {result.best_val_loss:.4f} "
        f"(best at step {result.best_step} of {result.steps}, early stop {result.stopped_early}); "
        f"held-out top-1 {before:.3f} -> {after:.3f}"
    )
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log and all(
        math.isfinite(r["val_loss"]) and {"real", "gen_image", "gen_caption"} <= set(r) for r in log
    )
    provenance = json.loads((result.output / "pacscore.json").read_text())
    assert provenance["best_val_loss"] == result.best_val_loss
    return result, before, after


def test_training_from_a_random_tiny_clip_lowers_val_loss_and_raises_held_out_accuracy(
    random_clip, data, tmp_path
):
    cfg = PACSTrainConfig(max_steps=800, **FAST)  # both bars are met from about step 500 on
    result, before, after = _train_and_measure(random_clip, data, tmp_path, cfg, "random tiny CLIP")
    assert result.best_val_loss < result.initial_val_loss - 1.0
    assert after >= before + 0.05


def test_training_relearns_the_projections_of_the_shapes_clip_at_the_papers_lr(data, tmp_path):
    start = shapes_clip_without_projections(tmp_path / "start", seed=0)
    # The paper's lambdas, lr and optimiser; a smaller batch and patience for 600 rows.
    cfg = PACSTrainConfig(batch_size=64, eval_every=50, patience=300, max_steps=600)  # bars met by step 500
    result, before, after = _train_and_measure(start, data, tmp_path, cfg, "shapes CLIP, projections reset")
    assert result.best_val_loss < result.initial_val_loss / 5
    assert before < 0.2 and after > 0.9


def test_resumed_training_ends_exactly_where_an_uninterrupted_run_does(random_clip, data, tmp_path):
    train, val, _ = data
    small_train, small_val = train.select(range(200)), val.select(range(64))
    cfg = dict(batch_size=32, eval_every=20, patience=1000, lr=1e-3, save_every=20)
    whole = train_pacs(
        str(random_clip), small_train, small_val, tmp_path / "whole", PACSTrainConfig(max_steps=120, **cfg),
        progress=False, num_threads=1,
    )  # fmt: skip
    train_pacs(
        str(random_clip), small_train, small_val, tmp_path / "split", PACSTrainConfig(max_steps=60, **cfg),
        progress=False, num_threads=1,
    )  # fmt: skip
    resumed = train_pacs(
        str(random_clip), small_train, small_val, tmp_path / "split", PACSTrainConfig(max_steps=120, **cfg),
        progress=False, num_threads=1,
    )  # fmt: skip
    assert resumed.steps == whole.steps == 120
    assert resumed.history == whole.history
    from safetensors.torch import load_file

    a, b = load_file(whole.output / "model.safetensors"), load_file(resumed.output / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_other_settings_is_refused(random_clip, data, tmp_path):
    train, val, _ = data
    small_train, small_val = train.select(range(64)), val.select(range(32))
    cfg = dict(batch_size=32, eval_every=10, max_steps=10)
    train_pacs(str(random_clip), small_train, small_val, tmp_path, PACSTrainConfig(**cfg), progress=False)
    with pytest.raises(ValueError, match=r"other settings.*lambda_v"):
        train_pacs(
            str(random_clip),
            small_train,
            small_val,
            tmp_path,
            PACSTrainConfig(lambda_v=0.5, **cfg),
            progress=False,
        )


def test_missing_column_and_bad_caption_are_named(random_clip, data, tmp_path):
    train, val, _ = data
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['generated_caption'\]"):
        train_pacs(str(random_clip), train.remove_columns("generated_caption"), val, tmp_path, progress=False)
    bad = train.select(range(4)).map(
        lambda r, i: {"caption": "" if i == 2 else r["caption"]}, with_indices=True
    )
    with pytest.raises(ValueError, match=r"row 2, column 'caption'"):
        train_pacs(str(random_clip), bad, val, tmp_path, progress=False)


def test_train_script_reads_a_saved_dataset_and_writes_usable_weights(random_clip, data, tmp_path):
    import importlib.util
    from pathlib import Path

    import datasets

    import capeval

    train, val, (images, _) = data
    folder = tmp_path / "pacs-data"
    datasets.DatasetDict(
        {"train": train.select(range(64)), "validation": val.select(range(32))}
    ).save_to_disk(folder)
    script = Path(__file__).resolve().parents[1] / "scripts" / "train_pacscore.py"
    spec = importlib.util.spec_from_file_location("train_pacscore", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--model", str(random_clip), "--dataset", str(folder), "--output", str(tmp_path / "run")]
    argv += ["--max-steps", "10", "--batch-size", "16", "--eval-every", "5", "--threads", "1"]
    assert module.main(argv) == 0
    out = capeval.PACScore(checkpoint=str(tmp_path / "run" / "model"))(["a red circle"], images=images[:1])
    assert 0.0 <= out["pacscore"] <= 2.0
