"""The six modules under evaluate's own contracts: names, ``combine``, ``add``/``add_batch`` streaming, load-time
options, ``evaluate.save``, ``compute`` twice on one object, and the multi-process mode (``num_process``)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import uuid

import evaluate
import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.clip.video import write_video
from capeval.registry import METRICS

PREDICTIONS = ["a red square on grass", "a dog runs on the beach", "a man rides a bike"]
REFERENCES = [["a red box on the grass"], ["a dog running on sand", "a puppy at the sea"], ["a cyclist"]]

# The keys of evaluate.combine over the six modules: a key two modules share gets the module's name as prefix.
COMBINED_KEYS = {
    "clipscore",
    "clipscore_scores",
    "clipscore_signature",
    "refclipscore",
    "refclipscore_scores",
    "refclipscore_signature",
    "clip_s",
    "clip_s_scores",
    "pacscore",
    "pacscore_scores",
    "pacscore_signature",
    "refpacscore",
    "refpacscore_scores",
    "wembsim",
    "wembsim_scores",
    "wembsim_signature",
    "reference_scores",
    "wmd",
    "wmd_scores",
    "wmd_signature",
    "distances",
    "emscore",
    "emscore_scores",
    "emscore_signature",
    "variant",
    "details",
}


def _frames(seed: int, n: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Three predictions with references, an image each (a path, a PIL image, an array) and a video each (a file
    PyAV decodes, a list of frames, a (T, H, W, C) array)."""
    folder = tmp_path_factory.mktemp("contracts")
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 256, (40, 56, 3), dtype=np.uint8) for _ in range(3)]
    Image.fromarray(pixels[0]).save(folder / "first.png")
    video = write_video(folder / "clip.mp4", _frames(1))
    return {
        "predictions": PREDICTIONS,
        "references": REFERENCES,
        "images": [str(folder / "first.png"), Image.fromarray(pixels[1]), pixels[2]],
        "videos": [str(video), _frames(2), np.stack(_frames(3, n=3))],
    }


@pytest.fixture(scope="module")
def load_options(tiny_clip_dir):
    model = {"model": str(tiny_clip_dir), "device": "cpu"}
    return {
        "clipscore": model,
        "refclipscore": model,
        "pacscore": {"checkpoint": str(tiny_clip_dir), "device": "cpu"},
        "wembsim": {},
        "wmd": {},
        "emscore": model,
    }


def _load(repo_root, load_options, name):
    return evaluate.load(str(repo_root / "metrics" / name), **load_options[name])


@pytest.fixture(scope="module")
def modules(repo_root, load_options):
    return {name: _load(repo_root, load_options, name) for name in METRICS}


@pytest.fixture(scope="module")
def separate(modules, inputs):
    """Each module's own result on every input (each takes all of them and ignores those it does not use)."""
    return {name: module.compute(**inputs) for name, module in modules.items()}


def _rows(inputs, rows: slice) -> dict:
    return {key: values[rows] for key, values in inputs.items()}


def test_each_module_is_named_after_its_folder(repo_root):
    for name in METRICS:
        assert evaluate.load(str(repo_root / "metrics" / name)).name == name
        assert capeval.load(name).name == name


def test_separate_results_equal_the_plain_api(separate, inputs, tiny_clip_dir):
    model = {"model": str(tiny_clip_dir), "device": "cpu"}
    preds, refs, images, videos = (inputs[k] for k in ("predictions", "references", "images", "videos"))
    assert separate["clipscore"] == capeval.CLIPScore(**model)(preds, images=images)
    assert separate["refclipscore"] == capeval.RefCLIPScore(**model)(preds, references=refs, images=images)
    pacscore = capeval.PACScore(checkpoint=str(tiny_clip_dir), device="cpu")
    assert separate["pacscore"] == pacscore(preds, references=refs, images=images)
    assert separate["wmd"] == capeval.WMD()(preds, refs)
    assert separate["wembsim"] == capeval.WEmbSim()(preds, refs)
    assert separate["emscore"] == capeval.EMScore(**model)(preds, references=refs, videos=videos)


def test_combine_of_all_six_keeps_every_key_of_every_module(modules, inputs, separate):
    combined = evaluate.combine(list(modules.values())).compute(**inputs)
    assert set(combined) == COMBINED_KEYS
    counts: dict[str, int] = {}
    for result in separate.values():
        for key in result:
            counts[key] = counts.get(key, 0) + 1
    # No key overwritten: every value of every module is in the combined result, under its own name.
    assert len(combined) == sum(len(result) for result in separate.values())
    for name, result in separate.items():
        for key, value in result.items():
            assert combined[key if counts[key] == 1 else f"{name}_{key}"] == value, (name, key)


def test_combine_streams_every_input_with_add_batch_and_add(modules, inputs, separate):
    combined = evaluate.combine(list(modules.values()))
    combined.add_batch(**_rows(inputs, slice(0, 1)))
    combined.add_batch(**_rows(inputs, slice(1, 2)))
    last = _rows(inputs, slice(2, 3))
    combined.add(
        prediction=last["predictions"][0],
        reference=last["references"][0],
        images=last["images"][0],
        videos=last["videos"][0],
    )
    streamed = combined.compute()
    for name, result in separate.items():
        for key, value in result.items():
            assert value in (streamed.get(key), streamed.get(f"{name}_{key}")), (name, key)


@pytest.mark.parametrize("name", METRICS)
def test_add_and_add_batch_over_several_batches_equal_one_compute(modules, inputs, separate, name):
    module = modules[name]
    module.add_batch(**_rows(inputs, slice(0, 2)))
    last = _rows(inputs, slice(2, 3))
    module.add(**{key: values[0] for key, values in last.items()})
    assert module.compute() == separate[name]


def test_every_video_form_streams_and_scores_as_the_plain_api(modules, tiny_clip_dir, tmp_path):
    import torch

    frames = _frames(5)
    paths = []
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(tmp_path / f"frame{i}.png")
        paths.append(str(tmp_path / f"frame{i}.png"))
    videos = [
        torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float() / 255,  # (T, C, H, W) float tensor
        paths,  # frames as image files
        [Image.fromarray(frame).convert("P") for frame in frames],  # palette frames (stored as PNG)
    ]
    module = modules["emscore"]
    module.add_batch(predictions=PREDICTIONS[:2], videos=videos[:2])
    module.add(prediction=PREDICTIONS[2], videos=videos[2])
    direct = capeval.EMScore(model=str(tiny_clip_dir), device="cpu")(PREDICTIONS, videos=videos)
    assert module.compute() == direct
    with pytest.raises(ValueError, match="video 1, frame 0: image 0: array of shape .* is not an image"):
        module.add_batch(predictions=PREDICTIONS[:2], videos=[paths, [np.zeros((2, 3, 5))]])


@pytest.mark.parametrize("name", METRICS)
def test_compute_twice_on_one_object_gives_the_same_result(modules, inputs, separate, name):
    assert modules[name].compute(**inputs) == separate[name]
    assert modules[name].compute(**inputs) == separate[name]


@pytest.mark.parametrize("name", METRICS)
def test_evaluate_save_writes_every_result_as_json(separate, tmp_path, name):
    path = evaluate.save(str(tmp_path / f"{name}.json"), **separate[name])
    saved = json.loads(path.read_text())
    assert {k: v for k, v in saved.items() if not k.startswith("_")} == separate[name]


def test_options_given_when_loading_are_used_and_compute_time_options_win(repo_root, tiny_clip_dir, inputs):
    preds, images = inputs["predictions"], inputs["images"]
    module = evaluate.load(str(repo_root / "metrics" / "clipscore"), model=str(tiny_clip_dir), w=2.0)
    assert module.load_options == {"model": str(tiny_clip_dir), "w": 2.0}
    assert module.compute(predictions=preds, images=images) == capeval.CLIPScore(
        model=str(tiny_clip_dir), w=2.0
    )(preds, images=images)
    assert module.compute(predictions=preds, images=images, w=3.0) == capeval.CLIPScore(
        model=str(tiny_clip_dir), w=3.0
    )(preds, images=images)
    wmd = capeval.load("wmd", sigma=2.0, stopwords="none")
    assert wmd.compute(predictions=preds, references=REFERENCES) == capeval.WMD(sigma=2.0, stopwords="none")(
        preds, REFERENCES
    )


def test_loading_refuses_an_option_the_module_lacks_and_a_bad_value_by_name(repo_root):
    path = str(repo_root / "metrics" / "clipscore")
    with pytest.raises(
        TypeError, match=r"CLIPScore does not take \['vectors'\] when loading; its options are"
    ):
        evaluate.load(path, vectors="glove-6b-50d")
    with pytest.raises(ValueError, match=r"w must be a positive number \(finite, > 0\)"):
        evaluate.load(path, w=math.nan)
    with pytest.raises(
        ValueError, match=r"w must be at most 1e\+06 \(capeval.validation.MAX_W\), got 1e\+308"
    ):
        evaluate.load(path, w=1e308)
    with pytest.raises(TypeError, match="batch_size must be an int >= 1, got str"):
        capeval.load("emscore", batch_size="8")


def test_an_option_given_at_compute_to_a_module_without_it_names_the_module_and_says_load_it(modules, inputs):
    combined = evaluate.combine([modules["clipscore"], modules["wmd"]])
    with pytest.raises(
        TypeError, match=r"WMD \(wmd\) has no option \['prefix'\].*evaluate.load\(path, prefix=\.\.\.\)"
    ):
        combined.compute(**_rows(inputs, slice(0, 3)), prefix="A picture of")


_SHARD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import evaluate
    import numpy as np
    folder, process_id, experiment, cache_dir, model, rows = sys.argv[1:7]
    process_id, (start, stop) = int(process_id), json.loads(rows)
    options = {"model": model, "device": "cpu"} if model else {}
    metric = evaluate.load(folder, num_process=2, process_id=process_id, experiment_id=experiment,
                           cache_dir=cache_dir, timeout=120, **options)
    predictions = ["a red square on grass", "a dog runs on the beach", "a man rides a bike"][start:stop]
    references = [["a red box on the grass"], ["a dog running on sand", "a puppy"], ["a cyclist"]][start:stop]
    images = [np.random.default_rng(i).integers(0, 256, (40, 56, 3), dtype=np.uint8) for i in range(start, stop)]
    metric.add_batch(predictions=predictions, references=references, **({"images": images} if model else {}))
    print(json.dumps(metric.compute()))
    """
)


@pytest.mark.slow  # two fresh Python processes importing torch: ~15 s idle, over a minute on a loaded machine
@pytest.mark.parametrize("name", ["clipscore"])
def test_two_processes_sharing_a_cache_dir_gather_every_shard(repo_root, tiny_clip_dir, tmp_path, name):
    """evaluate's multi-process mode: each process adds its shard (images stored in the Arrow files the
    processes share), process 0 computes over both. The text metrics' multi-process test is in test_wmd_module.py."""
    script = tmp_path / "shard.py"
    script.write_text(_SHARD_SCRIPT)
    model = str(tiny_clip_dir) if name == "clipscore" else ""
    experiment, cache = uuid.uuid4().hex, tmp_path / "cache"
    env_path = str(repo_root / "src")
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(repo_root / "metrics" / name),
                str(pid),
                experiment,
                str(cache),
                model,
                json.dumps(rows),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**__import__("os").environ, "PYTHONPATH": env_path},
        )
        for pid, rows in ((0, [0, 2]), (1, [2, 3]))
    ]
    outputs = [job.communicate(timeout=300) for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert json.loads(outputs[1][0].strip().splitlines()[-1]) is None
    gathered = json.loads(outputs[0][0].strip().splitlines()[-1])
    images = [np.random.default_rng(i).integers(0, 256, (40, 56, 3), dtype=np.uint8) for i in range(3)]
    references = [["a red box on the grass"], ["a dog running on sand", "a puppy"], ["a cyclist"]]
    if name == "clipscore":
        expected = capeval.CLIPScore(model=model, device="cpu")(PREDICTIONS, images=images)
    else:
        expected = capeval.WEmbSim()(PREDICTIONS, references)
    assert gathered == json.loads(json.dumps(expected))
