"""Sharded scoring across processes (capeval.corpus.distributed): same numbers as one process, errors everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import capeval
from capeval.clip.image_encoding import encode_images
from capeval.clip.text_encoding import encode_texts
from capeval.corpus.distributed import (
    SingleProcess,
    process_state,
    release_process_group,
    score_distributed,
    sharded_encode_images,
    sharded_encode_texts,
)
from capeval.registry import build_scorer

SCRIPT = Path(__file__).with_name("distributed_score_script.py")


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


@pytest.mark.slow
def test_two_cpu_processes_give_the_single_process_scores_exactly(tmp_path, tiny_clip_dir):
    single = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(tiny_clip_dir), str(tmp_path), "single"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    launched = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(SCRIPT), str(tiny_clip_dir), str(tmp_path), "sharded",
        ],
        env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    single_out, _ = single.communicate(timeout=300)
    assert single.returncode == 0, single_out[-3000:]
    assert launched.returncode == 0, (launched.stdout + launched.stderr)[-3000:]

    reference = json.loads((tmp_path / "single-rank0.json").read_text())["results"]
    ranks = [json.loads((tmp_path / f"sharded-rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        got = rank["results"]
        assert rank["counts"]["world"] == 2 and rank["counts"]["backend"] == "gloo"
        # Image and caption metrics: every per-sample float identical, headline too.
        for name, keys in {"clipscore": ("scores",), "refclipscore": ("scores", "clip_s_scores")}.items():
            for key in keys:
                assert got[name][key] == reference[name][key], (name, key)
            assert got[name][name] == reference[name][name]
            assert got[name]["signature"] == reference[name]["signature"]
        # Videos are split by video, which regroups frames into other batches: equal up to rounding.
        assert got["emscore"]["scores"] == pytest.approx(reference["emscore"]["scores"], abs=1e-6)
    # Each process encoded its own share of the distinct images and captions, together all of them once.
    shares = [rank["counts"]["clipscore_call"] for rank in ranks]
    assert all(s["images"] > 0 and s["texts"] > 0 for s in shares)
    from distributed_score_script import workload

    captions, images, _, _ = workload()
    distinct_images = len({img.tobytes() + bytes(str(img.shape), "ascii") for img in images})
    assert sum(s["images"] for s in shares) == distinct_images
    assert sum(s["texts"] for s in shares) == len(set(captions))


def test_one_process_sharded_encoders_equal_the_plain_encoders(tiny_clip_dir):
    backbone = capeval.load_backbone(str(tiny_clip_dir), device="cpu")
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (30, 30, 3), dtype=np.uint8) for _ in range(9)]
    images += images[:3]
    texts = [f"a caption {'long ' * (i % 5)}{i % 7}" for i in range(15)]
    state = SingleProcess()
    assert sharded_encode_images(backbone, images, 4, state).equal(
        encode_images(backbone, images, batch_size=4)
    )
    got = sharded_encode_texts(backbone, texts, "A photo depicts", 4, state)
    assert got.equal(encode_texts(backbone, texts, prefix="A photo depicts", batch_size=4))


def test_score_distributed_in_one_process_is_the_metric_call(tiny_clip_dir):
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(5)]
    captions = ["a red circle", "a blue square", "a green triangle", "a red circle", "two shapes"]
    plain = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu", batch_size=2)(captions, images=images)
    got = score_distributed("clipscore", captions, images=images, model=str(tiny_clip_dir), batch_size=2)
    assert got == plain


def test_a_bad_image_is_reported_with_its_index_in_the_callers_list(tiny_clip_dir):
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(4)]
    images = images + images[:2] + [{"bytes": b"not an image"}]
    with pytest.raises(ValueError, match="^image 6 is not a readable image file"):
        score_distributed("clipscore", ["x"] * 7, images=images, model=str(tiny_clip_dir), batch_size=2)


def test_options_are_checked_against_the_metric(tiny_clip_dir):
    with pytest.raises(TypeError, match=r"clipscore does not take the option\(s\) \['vectors'\]"):
        build_scorer("clipscore", model=str(tiny_clip_dir), vectors="glove")
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(TypeError, match="only apply to a metric name"):
        score_distributed(scorer, ["x"], images=[np.zeros((8, 8, 3), np.uint8)], batch_size=3)
    with pytest.raises(TypeError, match=r"CLIPScore does not take \['references'\]"):
        score_distributed(scorer, ["x"], images=[np.zeros((8, 8, 3), np.uint8)], references=[["y"]])
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        build_scorer("bleu")


def test_scoring_outside_a_distributed_launch_leaves_no_accelerate_state(tiny_clip_dir):
    from accelerate import PartialState

    if PartialState._shared_state:
        pytest.skip("another test of this session already set up accelerate's state")
    images = [np.zeros((8, 8, 3), np.uint8)]
    score_distributed("clipscore", ["x"], images=images, model=str(tiny_clip_dir))
    assert isinstance(process_state(), SingleProcess) and not PartialState._shared_state


def test_a_process_group_the_caller_started_is_never_ended_by_capeval(tmp_path, monkeypatch):
    import torch
    import torch.distributed as dist
    from accelerate import PartialState

    assert not dist.is_initialized()  # no test leaves a group behind
    earlier = dict(PartialState._shared_state)  # a Trainer's, say: put back after
    PartialState._reset_state()
    # The caller's group (one process here), with the variables of a launch, so that capeval takes accelerate's
    # state; accelerate writes these variables itself (monkeypatch puts them back), and would set this process's
    # torch threads if OMP_NUM_THREADS were unset.
    threads = torch.get_num_threads()
    launch = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    others = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "OMP_NUM_THREADS": str(threads)}
    for name, value in {**launch, **others}.items():
        monkeypatch.setenv(name, value)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        state = process_state("cpu")
        assert not isinstance(state, SingleProcess) and state.num_processes == 1
        assert release_process_group() is False
        assert dist.is_initialized() and PartialState._shared_state
    finally:
        dist.destroy_process_group()
        PartialState._reset_state()
        PartialState._shared_state.update(earlier)
    assert release_process_group() is False  # nothing was started here
    assert torch.get_num_threads() == threads
