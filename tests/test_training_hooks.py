"""compute_metrics factories for transformers' Trainer: decoding, pairing by index, flat floats."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import EvalPrediction

import capeval
from capeval.integrations.trainer import make_compute_metrics
from capeval.shapes import all_scenes, caption, draw, random_scene, shapes_clip_path

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
PAD, BOS, EOS = 0, 1, 2


def word_tokenizer():
    """A word-level tokenizer over the shapes vocabulary (built offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for s in all_scenes() for w in caption(s).split()})
    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]", unk_token="[UNK]"
    )


def encode_padded(tokenizer, texts, pad=-100, width=None):
    ids = [tokenizer(t)["input_ids"] + [EOS] for t in texts]
    width = width or max(map(len, ids))
    return np.array([x + [pad] * (width - len(x)) for x in ids])


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


@pytest.fixture(scope="module")
def eval_rows():
    import datasets

    scenes = all_scenes()[::7]
    return datasets.Dataset.from_dict(
        {
            "image": [draw(s, size=(32, 32)) for s in scenes],
            "caption": [caption(s) for s in scenes],
            "references": [[caption(s), f"one {s.color} {s.shape}"] for s in scenes],
        }
    )


def test_hook_decodes_minus_100_padding_and_scores_like_the_plain_api(tokenizer, eval_rows, tiny_clip_dir):
    captions = list(eval_rows["caption"])
    preds = [c.replace("red", "blue") for c in captions]
    hook = make_compute_metrics(
        tokenizer, eval_rows, ["clipscore", "refclipscore"], options={"model": str(tiny_clip_dir)}
    )
    # Trainer pads generated ids across batches with -100, labels with -100.
    out = hook(EvalPrediction(encode_padded(tokenizer, preds, width=14), encode_padded(tokenizer, captions)))
    assert hook.last_predictions == preds
    direct = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        preds, references=[[c] for c in captions], images=list(eval_rows["image"])
    )
    clip = capeval.CLIPScore(model=str(tiny_clip_dir))(preds, images=list(eval_rows["image"]))
    assert out == {
        "clipscore": clip["clipscore"],
        "refclipscore": direct["refclipscore"],
        "refclipscore_clip_s": direct["clip_s"],
        "empty_predictions": 0,
    }
    assert all(type(v) in (float, int) for v in out.values())
    assert hook.signatures["clipscore"].startswith("clipscore|")


def test_hook_takes_references_from_a_dataset_column(tokenizer, eval_rows, tiny_clip_dir):
    captions = list(eval_rows["caption"])
    hook = make_compute_metrics(
        tokenizer,
        eval_rows,
        ["refclipscore", "wmd", "wembsim"],
        references_column="references",
        options={"model": str(tiny_clip_dir)},
    )
    out = hook(EvalPrediction(encode_padded(tokenizer, captions), encode_padded(tokenizer, captions)))
    refs = list(eval_rows["references"])
    assert out["wmd"] == capeval.WMD()(captions, refs)["wmd"]
    assert out["wembsim"] == capeval.WEmbSim()(captions, refs)["wembsim"]
    ref = capeval.RefCLIPScore(model=str(tiny_clip_dir))(
        captions, references=refs, images=list(eval_rows["image"])
    )
    assert out["refclipscore"] == ref["refclipscore"]


def test_pacscore_hook_logs_pac_s_and_ref_pac_s(tokenizer, eval_rows, tiny_clip_dir):
    captions = list(eval_rows["caption"])
    preds = captions[1:] + captions[:1]
    # A converted PAC-S folder is a CLIP folder: the tiny CLIP stands in for one.
    hook = make_compute_metrics(tokenizer, eval_rows, {"pacscore": {"checkpoint": str(tiny_clip_dir)}})
    out = hook(EvalPrediction(encode_padded(tokenizer, preds), encode_padded(tokenizer, captions)))
    direct = capeval.PACScore(checkpoint=str(tiny_clip_dir))(
        preds, references=[[c] for c in captions], images=list(eval_rows["image"])
    )
    assert out == {
        "pacscore": direct["pacscore"],
        "pacscore_refpacscore": direct["refpacscore"],
        "empty_predictions": 0,
    }


def test_batch_eval_metrics_mode_accumulates_to_the_same_result(tokenizer, eval_rows, tiny_clip_dir):
    captions = list(eval_rows["caption"])
    hook = make_compute_metrics(tokenizer, eval_rows, ["clipscore"], options={"model": str(tiny_clip_dir)})
    whole = hook(EvalPrediction(encode_padded(tokenizer, captions), encode_padded(tokenizer, captions)))
    parts = []
    for start in range(0, len(captions), 4):
        chunk = captions[start : start + 4]
        ids = torch.from_numpy(encode_padded(tokenizer, chunk, pad=PAD))  # batches arrive as tensors
        parts.append(hook(EvalPrediction(ids, ids), compute_result=start + 4 >= len(captions)))
    assert parts[:-1] == [{}] * (len(parts) - 1)
    assert parts[-1] == whole


def test_hook_refuses_a_prediction_count_that_is_not_the_dataset_length(tokenizer, eval_rows, tiny_clip_dir):
    hook = make_compute_metrics(tokenizer, eval_rows, ["clipscore"], options={"model": str(tiny_clip_dir)})
    captions = list(eval_rows["caption"])[:-1]
    with pytest.raises(ValueError, match="predictions for an evaluation dataset of 11 rows"):
        hook(EvalPrediction(encode_padded(tokenizer, captions), encode_padded(tokenizer, captions)))


def test_hook_detects_a_dataset_in_another_order_through_the_labels(tokenizer, eval_rows, tiny_clip_dir):
    hook = make_compute_metrics(
        tokenizer,
        eval_rows.shuffle(seed=1),
        ["clipscore"],
        label_text_column="caption",
        options={"model": str(tiny_clip_dir)},
    )
    captions = list(eval_rows["caption"])
    with pytest.raises(ValueError, match=r"evaluation row \d+: the label ids decode to"):
        hook(EvalPrediction(encode_padded(tokenizer, captions), encode_padded(tokenizer, captions)))


def test_empty_predictions_score_zero_and_are_counted(tokenizer, eval_rows, tiny_clip_dir):
    captions = list(eval_rows["caption"])
    preds = list(captions)
    preds[3] = ""
    ids = encode_padded(tokenizer, preds)
    hook = make_compute_metrics(tokenizer, eval_rows, ["clipscore"], options={"model": str(tiny_clip_dir)})
    out = hook(EvalPrediction(ids, encode_padded(tokenizer, captions)))
    keep = [i for i in range(len(preds)) if i != 3]
    scores = capeval.CLIPScore(model=str(tiny_clip_dir))(
        [preds[i] for i in keep], images=[eval_rows[i]["image"] for i in keep]
    )["scores"]
    assert out["empty_predictions"] == 1
    assert out["clipscore"] == pytest.approx(sum(scores) / len(preds), abs=1e-6)
    strict = make_compute_metrics(
        tokenizer, eval_rows, ["clipscore"], options={"model": str(tiny_clip_dir)}, empty_predictions="raise"
    )
    with pytest.raises(ValueError, match="prediction 3 decoded to an empty caption"):
        strict(EvalPrediction(ids, encode_padded(tokenizer, captions)))


def test_the_trainer_hook_counts_an_invisible_generated_caption_as_empty(tiny_clip_dir):
    import datasets

    from capeval.integrations.trainer import make_compute_metrics

    rows = datasets.Dataset.from_dict({"image": [Image.new("RGB", (32, 32), c) for c in ("red", "blue")]})

    class Decoder:  # the hook's scoring of decoded captions does not decode
        def batch_decode(self, ids, skip_special_tokens=True):
            raise AssertionError("not called")

    hook = make_compute_metrics(Decoder(), rows, ["clipscore"], options={"model": str(tiny_clip_dir)})
    out = hook.score(["a red square", "\u200b"])
    alone = capeval.CLIPScore(model=str(tiny_clip_dir))(["a red square"], images=[rows[0]["image"]])[
        "clipscore"
    ]
    assert out["empty_predictions"] == 1
    assert out["clipscore"] == pytest.approx(alone / 2, abs=1e-6)


def test_logits_instead_of_generated_ids_point_to_predict_with_generate(tokenizer, eval_rows, tiny_clip_dir):
    hook = make_compute_metrics(tokenizer, eval_rows, ["clipscore"], options={"model": str(tiny_clip_dir)})
    logits = np.zeros((len(eval_rows), 5, 30), dtype=np.float32)
    with pytest.raises(ValueError, match="predict_with_generate=True"):
        hook(EvalPrediction(logits, np.zeros((len(eval_rows), 5), dtype=np.int64)))


def test_bad_metric_names_and_options_are_refused_when_the_hook_is_made(tokenizer, eval_rows, tiny_clip_dir):
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        make_compute_metrics(tokenizer, eval_rows, ["bleu"])
    with pytest.raises(ValueError, match="emscore scores videos"):
        make_compute_metrics(tokenizer, eval_rows, ["emscore"])
    with pytest.raises(TypeError, match=r"option\(s\) \['modle'\]"):
        make_compute_metrics(
            tokenizer, eval_rows, ["clipscore"], options={"model": str(tiny_clip_dir), "modle": 1}
        )
    with pytest.raises(ValueError, match="no image column 'picture'"):
        make_compute_metrics(
            tokenizer, eval_rows, ["clipscore"], image_column="picture", options={"model": str(tiny_clip_dir)}
        )


# -- end to end: fine-tune a tiny captioner and evaluate it through Seq2SeqTrainer -----------------------------


def tiny_captioner(vocab_size: int):
    from transformers import GPT2Config, GPT2LMHeadModel, VisionEncoderDecoderModel, ViTConfig, ViTModel

    torch.manual_seed(0)
    encoder = ViTModel(
        ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64,
        )
    )  # fmt: skip
    decoder = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=vocab_size, n_embd=32, n_layer=1, n_head=2, n_positions=16, add_cross_attention=True,
            bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
        )
    )  # fmt: skip
    model = VisionEncoderDecoderModel(encoder=encoder, decoder=decoder)
    for config in (model.config, model.generation_config):
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = BOS, PAD, EOS
    return model


@pytest.fixture()
def one_thread():
    # Tiny matrices: one thread is faster than two contending ones on a shared 2-core runner.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_seq2seq_trainer_logs_caption_metrics_equal_to_a_direct_compute(tmp_path, tokenizer, one_thread):
    import datasets
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    rng = random.Random(0)
    train_scenes = [random_scene(rng) for _ in range(256)]
    train = datasets.Dataset.from_dict(
        {
            "image": [draw(s, rng, size=(32, 32)) for s in train_scenes],
            "caption": [caption(s) for s in train_scenes],
        }
    )
    eval_scenes = all_scenes()[::5]
    evaluation = datasets.Dataset.from_dict(
        {"image": [draw(s) for s in eval_scenes], "caption": [caption(s) for s in eval_scenes]}
    )

    def collate(rows):
        # The captioner sees 32x32 pictures; the metrics read the 128x128 originals from the dataset.
        small = [r["image"].convert("RGB").resize((32, 32), Image.BICUBIC) for r in rows]
        pixels = np.stack([np.asarray(img, dtype=np.float32) / 127.5 - 1 for img in small])
        return {
            "pixel_values": torch.from_numpy(pixels).permute(0, 3, 1, 2),
            "labels": torch.from_numpy(encode_padded(tokenizer, [r["caption"] for r in rows])),
        }

    metrics = ["clipscore", "refclipscore", "wmd", "wembsim"]
    compute_metrics = make_compute_metrics(
        tokenizer,
        evaluation,
        metrics,
        label_text_column="caption",
        options={"model": str(shapes_clip_path())},
    )
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=32, per_device_eval_batch_size=4, max_steps=80,
        learning_rate=5e-3, predict_with_generate=True, generation_max_length=10, report_to=[],
        save_strategy="no", remove_unused_columns=False, use_cpu=True, logging_steps=40, seed=0,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = Seq2SeqTrainer(
        model=tiny_captioner(len(tokenizer)),
        args=args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=collate,
        compute_metrics=compute_metrics,
        processing_class=tokenizer,
    )
    trainer.train()
    logged = trainer.evaluate()
    expected_keys = {
        "eval_clipscore", "eval_refclipscore", "eval_refclipscore_clip_s", "eval_wmd", "eval_wembsim",
        "eval_empty_predictions",
    }  # fmt: skip
    assert expected_keys <= set(logged)
    assert expected_keys <= set(trainer.state.log_history[-1])

    # The same captions, generated again and decoded here, scored by the evaluate modules directly.
    generated = trainer.predict(evaluation).predictions
    captions = [
        t.strip()
        for t in tokenizer.batch_decode(np.where(generated < 0, PAD, generated), skip_special_tokens=True)
    ]
    assert captions == compute_metrics.last_predictions and all(captions)
    assert logged["eval_empty_predictions"] == 0
    model, images = str(shapes_clip_path()), list(evaluation["image"])
    references = [[c] for c in evaluation["caption"]]
    clip = capeval.load("clipscore").compute(predictions=captions, images=images, model=model)
    ref = capeval.load("refclipscore").compute(
        predictions=captions, references=references, images=images, model=model
    )
    wmd = capeval.load("wmd").compute(predictions=captions, references=references)
    wembsim = capeval.load("wembsim").compute(predictions=captions, references=references)
    assert logged["eval_clipscore"] == clip["clipscore"]
    assert logged["eval_refclipscore"] == ref["refclipscore"]
    assert logged["eval_refclipscore_clip_s"] == ref["clip_s"]
    assert logged["eval_wmd"] == wmd["wmd"]
    assert logged["eval_wembsim"] == wembsim["wembsim"]

    # batch_eval_metrics: Trainer calls the hook per batch with compute_result; same numbers.
    trainer.args.batch_eval_metrics = True
    batched = trainer.evaluate()
    assert {k: batched[k] for k in expected_keys} == {k: logged[k] for k in expected_keys}
