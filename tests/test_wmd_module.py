"""The wmd and wembsim evaluate modules: runnable examples, add_batch, multi-process mode, packaged loading."""

from __future__ import annotations

import doctest
import importlib.util
import uuid
from pathlib import Path

import pytest

import capeval

REPO = Path(__file__).resolve().parents[1]
PREDICTIONS = ["A dog runs on the grass.", "A man rides a bike.", "Two children play in the snow."]
REFERENCES = [
    ["A dog is running on grass.", "A puppy plays outside."],
    ["A cat sleeps on a sofa.", "A man is riding a bicycle."],
    ["Kids are playing in snow.", "Two kids build a snowman.", "Children outside in winter."],
]


def _module_source(name: str):
    spec = importlib.util.spec_from_file_location(f"_{name}_module", REPO / "metrics" / name / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["wmd", "wembsim"])
def test_kwargs_description_examples_run_offline_from_the_repo_root(name, monkeypatch):
    monkeypatch.chdir(REPO)
    text = _module_source(name)._KWARGS_DESCRIPTION
    test = doctest.DocTestParser().get_doctest(text, {}, f"{name}._KWARGS_DESCRIPTION", None, 0)
    assert len(test.examples) >= 3
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0


@pytest.mark.parametrize("name,api", [("wmd", "WMD"), ("wembsim", "WEmbSim")])
def test_add_batch_gives_the_plain_api_result(name, api, monkeypatch):
    import evaluate

    monkeypatch.chdir(REPO)
    metric = evaluate.load(f"metrics/{name}")
    metric.add_batch(predictions=PREDICTIONS[:2], references=REFERENCES[:2])
    metric.add(predictions=PREDICTIONS[2], references=REFERENCES[2])
    got = metric.compute()
    want = getattr(capeval, api)()(PREDICTIONS, REFERENCES)
    assert got == want


def test_options_pass_through_the_module(monkeypatch):
    import evaluate

    monkeypatch.chdir(REPO)
    wmd = evaluate.load("metrics/wmd")
    out = wmd.compute(predictions=PREDICTIONS, references=REFERENCES, sigma=2.0, normalize_vectors=True)
    assert out == capeval.WMD(sigma=2.0, normalize_vectors=True)(PREDICTIONS, REFERENCES)
    wembsim = evaluate.load("metrics/wembsim")
    out = wembsim.compute(predictions=PREDICTIONS, references=REFERENCES, reduction="max", stopwords="none")
    assert (
        out["scores"] == capeval.WEmbSim(reduction="max", stopwords="none")(PREDICTIONS, REFERENCES)["scores"]
    )


def _shard_compute(args):
    import evaluate

    folder, process_id, experiment, cache_dir, predictions, references = args
    metric = evaluate.load(
        folder,
        num_process=2,
        process_id=process_id,
        experiment_id=experiment,
        cache_dir=cache_dir,
        timeout=60,
    )
    metric.add_batch(predictions=predictions, references=references)
    return metric.compute()


@pytest.mark.parametrize("name", ["wmd", "wembsim"])
def test_multi_process_mode_gathers_every_shard(name, tmp_path):
    """evaluate's distributed mode: each process adds its shard, process 0 computes over all of them."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    folder = str(capeval.module_path(name))
    expected = capeval.load(name).compute(predictions=PREDICTIONS, references=REFERENCES)
    experiment = uuid.uuid4().hex
    jobs = [
        (folder, 0, experiment, str(tmp_path), PREDICTIONS[:2], REFERENCES[:2]),
        (folder, 1, experiment, str(tmp_path), PREDICTIONS[2:], REFERENCES[2:]),
    ]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_shard_compute, jobs)
    assert results[1] is None
    assert results[0]["scores"] == pytest.approx(expected["scores"])
    assert results[0]["signature"] == expected["signature"]


def test_capeval_exports_the_plain_apis_lazily():
    assert capeval.WMD.__module__ == "capeval.wmd"
    assert capeval.WEmbSim.__module__ == "capeval.wembsim"
    assert capeval.load_vectors().shape == (400_000, 50)
