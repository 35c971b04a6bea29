"""EMScore with PAC-S weights (the PAC-S authors' video metric): the authors' model, token by token.

The reference is the CLIP authors' ``clip/model.py`` at tiny size saved as a PAC-S ``.pth`` (as in
test_checkpoints); its token embeddings are taken the way the EMScore authors patch ``encode_text(local=True)``:
``ln_final(transformer(x)) @ text_projection`` at every position.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from authors_reference import authors_pixels
from test_checkpoints import IMAGE, build_reference, save_pacs, target_config
from test_emscore import _unit, ref_idf, ref_weights

from capeval.clip.backbones import clear_cache
from capeval.clip.checkpoints.convert import convert_pacscore_checkpoint
from capeval.clip.checkpoints.layout import CheckpointWarning
from capeval.clip.text_encoding import encode_text_tokens
from capeval.emscore import TEXT, VIDEO, EMScore
from capeval.shapes.tiny_clip import build_tiny_clip
from capeval.signature import parse_signature
from capeval_dev.testing.openai_reference import openai_tokenize

CANDS = ["a red square moves right", "two dogs play in the snow", "a bowl of soup !"]
REFS = [["a red box", "a square moving"], ["dogs in snow"], ["soup", "a bowl on a table", "dinner"]]


@pytest.fixture(scope="module")
def reference():
    return build_reference(seed=21)


@pytest.fixture(scope="module")
def pacs_file(reference, tmp_path_factory):
    return save_pacs(reference, tmp_path_factory.mktemp("pacs") / "clip_tiny.pth")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("target"), seed=4, config=target_config())


@pytest.fixture(scope="module")
def clips():
    rng = np.random.default_rng(3)
    return [[rng.integers(0, 256, (40, 48, 3), dtype=np.uint8) for _ in range(k)] for k in (3, 5, 2)]


@pytest.fixture(autouse=True)
def _quiet_and_fresh():
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)  # random test encoders differ from the target's
        yield
    clear_cache()


@torch.no_grad()
def authors_local_text(ref, texts):
    """EMScore's patched encode_text(local=True) on 77-padded ids: per text (tokens SOT..EOT, global, ids)."""
    ids = openai_tokenize(texts)
    tokens = torch.zeros(len(ids), 77, dtype=torch.long)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = torch.tensor(row)
    x = ref.token_embedding(tokens) + ref.positional_embedding
    x = ref.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
    x = _unit((ref.ln_final(x) @ ref.text_projection).double().numpy())
    return [(x[i, : len(r)], x[i, len(r) - 1], r) for i, r in enumerate(ids)]


@torch.no_grad()
def authors_frames(ref, frames):
    from PIL import Image

    pix = torch.stack([authors_pixels(Image.fromarray(f), IMAGE) for f in frames])
    return _unit(ref.encode_image(pix).double().numpy())


def test_token_embeddings_under_pac_s_weights_equal_the_authors_local_text(reference, pacs_file, target_dir):
    scorer = EMScore(model=str(target_dir), checkpoint=str(pacs_file), device="cpu")
    pooled, tokens, ids = encode_text_tokens(scorer.backbone, CANDS)
    for (want_tok, want_glob, want_ids), got_tok, got_glob, got_ids in zip(
        authors_local_text(reference, CANDS), tokens, pooled, ids, strict=True
    ):
        assert list(got_ids) == want_ids
        np.testing.assert_allclose(got_tok.numpy(), want_tok, atol=1e-5)
        np.testing.assert_allclose(got_glob.numpy(), want_glob, atol=1e-5)


def test_emscore_with_pac_s_weights_equals_the_formulas_on_the_authors_model(
    reference, pacs_file, target_dir, clips
):
    got = EMScore(model=str(target_dir), checkpoint=str(pacs_file), device="cpu")(CANDS, REFS, clips)
    cands = authors_local_text(reference, CANDS)
    refs = [authors_local_text(reference, r) for r in REFS]
    idf = ref_idf([s[2] for rs in refs for s in rs])
    for i, (xt, xg, xi) in enumerate(cands):
        wx = ref_weights(xi, idf)
        per_ref = []
        for rt, rg, ri in refs[i]:
            sim = xt @ rt.T
            p, r = float(wx @ sim.max(axis=1)), float(ref_weights(ri, idf) @ sim.max(axis=0))
            per_ref.append((p, r, 2 * p * r / (p + r), float(xg @ rg)))
        p, r, f, c = np.max(np.array(per_ref), axis=0)
        assert got["details"][TEXT]["figr_F"][i] == pytest.approx(f, abs=2e-5)
        assert got["details"][TEXT]["cogr"][i] == pytest.approx(c, abs=2e-5)
        frames = authors_frames(reference, clips[i])
        sim = xt @ frames.T
        p, r = float(wx @ sim.max(axis=1)), float(sim.max(axis=0).mean())
        assert got["details"][VIDEO]["figr_P"][i] == pytest.approx(p, abs=2e-5)
        assert got["details"][VIDEO]["figr_R"][i] == pytest.approx(r, abs=2e-5)
        assert got["details"][VIDEO]["cogr"][i] == pytest.approx(
            float(xg @ _unit(frames.mean(axis=0))), abs=2e-5
        )


def test_a_converted_pac_s_folder_loads_as_the_whole_model(pacs_file, target_dir, clips, tmp_path):
    from_pth = EMScore(model=str(target_dir), checkpoint=str(pacs_file), device="cpu")(CANDS, videos=clips)
    folder = convert_pacscore_checkpoint(pacs_file, tmp_path / "converted", model=str(target_dir))
    from_folder = EMScore(checkpoint=str(folder), device="cpu")(CANDS, videos=clips)
    assert from_folder["scores"] == pytest.approx(from_pth["scores"], abs=1e-5)
    plain = EMScore(model=str(target_dir), device="cpu")(CANDS, videos=clips)
    assert plain["scores"] != pytest.approx(from_pth["scores"], abs=1e-3)
    fields = parse_signature(from_pth["signature"])[1]
    assert fields["checkpoint"].startswith("clip_tiny@sha256:")
    assert parse_signature(from_folder["signature"])[1]["checkpoint"].startswith("converted@sha256:")
    assert "checkpoint" not in parse_signature(plain["signature"])[1]


def test_the_module_passes_the_checkpoint_through(pacs_file, target_dir, clips, repo_root):
    import evaluate

    module = evaluate.load(str(repo_root / "metrics" / "emscore"))
    got = module.compute(predictions=CANDS, videos=clips, model=str(target_dir), checkpoint=str(pacs_file))
    want = EMScore(model=str(target_dir), checkpoint=str(pacs_file))(CANDS, videos=clips)
    assert got["scores"] == pytest.approx(want["scores"], abs=1e-6)
    assert got["signature"] == want["signature"]
