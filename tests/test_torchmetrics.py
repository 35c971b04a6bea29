"""capeval.torchmetrics: the six metrics as torchmetrics Metrics equal capeval's callables on the concatenated
inputs of their updates, on the shapes world (in one process; processes and Lightning: test_torchmetrics_training)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import warnings

import numpy as np
import pytest
import torch
from torchmetrics_world import (
    NAMES,
    batch,
    callable_result,
    options,
    torchmetric,
    world,
)

import capeval

TOL = 1e-6
EXTRAS = {  # the callables' per-sample extras that results() carries too
    "refclipscore": ("clip_s_scores",),
    "pacscore": ("refpacscore_scores",),
    "wmd": ("distances",),
    "emscore": (),
}


@pytest.fixture(scope="module")
def data():
    return world()


@pytest.fixture(scope="module")
def expected(data):
    """capeval's callables on all twelve items at once."""
    return {name: callable_result(name, data) for name in NAMES}


def _fed(name: str, data, cuts=(0, 5, 6, 12)):
    metric = torchmetric(name)
    for a, b in zip(cuts, cuts[1:], strict=False):
        preds, inputs = batch(data, name, a, b)
        metric.update(preds, **inputs)
    return metric


def _close(got, want, tol=TOL):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


@pytest.mark.parametrize("name", NAMES)
def test_batched_updates_equal_capevals_callable_on_the_concatenated_inputs(name, data, expected):
    want = expected[name]
    batched = _fed(name, data)  # three updates of 5, 1 and 6 items
    whole = _fed(name, data, cuts=(0, 12))

    value = batched.compute()
    assert value.ndim == 0 and value.dtype == torch.float64
    assert float(value) == pytest.approx(want[name], abs=TOL)
    # The corpus score is the mean of the per-sample scores (hand-checked from the callable's own list).
    assert float(value) == pytest.approx(float(np.mean(want["scores"])), abs=TOL)
    _close(batched.per_sample(), want["scores"])
    _close(whole.per_sample(), batched.per_sample())

    results = batched.results()
    assert results["signature"] == want["signature"]
    assert list(results)[-1] == "signature"
    for key in EXTRAS.get(name, ()):
        _close(results[key], want[key])
    if name == "emscore":
        assert results["variant"] == want["variant"] == "EMScore(X,V,X*)"
        for variant, details in want["details"].items():
            for key, values in details.items():
                _close(results["details"][variant][key], values)


def test_pacscore_keeps_refpac_s_when_every_update_gives_references(data, expected):
    metric = _fed("pacscore", data)
    assert float(metric.refpacscore()) == pytest.approx(expected["pacscore"]["refpacscore"], abs=TOL)
    assert float(metric.compute()) == pytest.approx(expected["pacscore"]["pacscore"], abs=TOL)


def test_emscore_idf_comes_from_the_whole_corpus_not_from_each_batch(data, expected):
    metric = _fed("emscore", data, cuts=(0, 6, 12))
    assert float(metric.compute()) == pytest.approx(expected["emscore"]["emscore"], abs=TOL)
    # Scoring each half on its own gives other IDF weights, hence other scores: the metric must not do that.
    halves = [callable_result("emscore", data, a, b)["scores"] for a, b in ((0, 6), (6, 12))]
    per_batch = np.concatenate(halves)
    assert np.abs(per_batch - np.asarray(expected["emscore"]["scores"])).max() > 1e-3
    _close(metric.per_sample(), expected["emscore"]["scores"])


@pytest.mark.parametrize("name", NAMES)
def test_reset_forgets_every_update(name, data):
    metric = _fed(name, data)
    metric.reset()
    preds, inputs = batch(data, name, 3, 8)
    metric.update(preds, **inputs)
    want = callable_result(name, data, 3, 8)
    _close(metric.per_sample(), want["scores"])
    assert float(metric.compute()) == pytest.approx(want[name], abs=TOL)


def test_forward_gives_the_batch_score_and_keeps_accumulating(data, expected):
    metric = torchmetric("clipscore")
    first = metric(*_args(data, "clipscore", 0, 7))
    assert float(first) == pytest.approx(callable_result("clipscore", data, 0, 7)["clipscore"], abs=TOL)
    metric(*_args(data, "clipscore", 7, 12))
    assert float(metric.compute()) == pytest.approx(expected["clipscore"]["clipscore"], abs=TOL)


def _args(data, name, a, b):
    preds, inputs = batch(data, name, a, b)
    return (preds, *inputs.values())


def test_states_are_tensors_on_the_metric_device(data):
    for name in NAMES:
        metric = _fed(name, data)
        for state in metric.metric_state.values():
            for tensor in state if isinstance(state, list) else [state]:
                assert isinstance(tensor, torch.Tensor) and tensor.device == metric.device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_to_cuda_moves_the_states_and_the_encoder(data, expected):
    for name in ("clipscore", "refclipscore", "emscore"):
        metric = _cuda_metric(name).to("cuda")
        for a, b in ((0, 5), (5, 12)):
            preds, inputs = batch(data, name, a, b)
            metric.update(preds, **inputs)
        assert metric.scorer.backbone.device.type == "cuda"
        assert metric.compute().device.type == "cuda"
        _close(metric.per_sample().cpu(), expected[name]["scores"], tol=1e-4)


def _cuda_metric(name):
    from capeval import torchmetrics as tm

    opts = {k: v for k, v in options(name).items() if k != "device"}  # device=None: follow the metric
    return {"clipscore": tm.CLIPScore, "refclipscore": tm.RefCLIPScore, "emscore": tm.EMScore}[name](**opts)


def test_device_none_follows_the_metric_and_an_explicit_device_stays(data):
    from capeval import torchmetrics as tm

    opts = {k: v for k, v in options("clipscore").items() if k != "device"}
    follows = tm.CLIPScore(**opts)
    assert follows._scorer is None  # nothing loaded until the first update
    follows.update(*_args(data, "clipscore", 0, 2))
    assert str(follows.scorer.backbone.device) == str(follows.device) == "cpu"
    pinned = tm.CLIPScore(**opts, device="cpu")
    assert pinned._wanted_device() == "cpu"


def test_a_pickled_metric_carries_its_options_and_states_not_the_model(data, expected):
    metric = _fed("clipscore", data, cuts=(0, 6))
    blob = pickle.dumps(metric)
    assert len(blob) < 50_000  # the shapes CLIP alone is 11 MB
    restored = pickle.loads(blob)
    assert restored._scorer is None
    restored.update(*_args(data, "clipscore", 6, 12))
    _close(restored.per_sample(), expected["clipscore"]["scores"])


def test_a_metric_collection_gives_each_metric_the_inputs_it_takes(data, expected):
    from torchmetrics import MetricCollection

    collection = MetricCollection({name: torchmetric(name) for name in ("clipscore", "refclipscore", "wmd")})
    for a, b in ((0, 6), (6, 12)):
        preds = data["preds"][a:b]
        collection.update(preds, images=data["images"][a:b], references=data["references"][a:b])
    values = collection.compute()
    for name in ("clipscore", "refclipscore", "wmd"):
        assert float(values[name]) == pytest.approx(expected[name][name], abs=TOL)


def test_plot_draws_the_computed_value_on_a_matplotlib_figure(data, expected):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    metric = _fed("wmd", data)
    fig, ax = metric.plot()
    assert isinstance(fig, Figure)
    drawn = [float(y) for line in ax.get_lines() for y in line.get_ydata()]
    assert any(abs(y - expected["wmd"]["wmd"]) < TOL for y in drawn)
    assert ax.get_ylim()[0] <= 0.0 and ax.get_ylim()[1] >= 1.0  # WMD's bounds: scores in [0, 1]


def test_options_and_defaults_are_those_of_capevals_callables():
    from capeval import torchmetrics as tm
    from capeval.registry import accepted_options, metric_class

    torch_only = {"sync_on_compute", "process_group", "compute_on_cpu"}
    for name, cls in {
        "clipscore": tm.CLIPScore,
        "refclipscore": tm.RefCLIPScore,
        "pacscore": tm.PACScore,
        "wmd": tm.WMD,
        "wembsim": tm.WEmbSim,
        "emscore": tm.EMScore,
    }.items():
        assert (
            cls.higher_is_better is True and cls.is_differentiable is False and cls.full_state_update is False
        )
        ours = inspect.signature(cls.__init__).parameters
        theirs = metric_class(name)
        assert set(ours) - {"self"} - torch_only == accepted_options(theirs), name
        defaults = {}
        for klass in reversed(theirs.__mro__):
            if "__init__" in klass.__dict__:
                params = inspect.signature(klass.__dict__["__init__"]).parameters.values()
                defaults.update(
                    {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
                )
        for option in accepted_options(theirs):
            assert ours[option].default == defaults[option], (name, option)


def test_bad_options_are_refused_when_the_metric_is_made():
    from capeval import torchmetrics as tm

    with pytest.raises(ValueError, match="w must be"):
        tm.CLIPScore(model="no/such-model", w=float("nan"))
    with pytest.raises(ValueError, match=r"w must be at most 1e\+06 \(capeval.validation.MAX_W\)"):
        tm.CLIPScore(model="no/such-model", w=1e308)
    with pytest.raises(ValueError, match="batch_size"):
        tm.RefCLIPScore(model="no/such-model", batch_size=0)
    with pytest.raises(ValueError, match="PAC-S"):
        tm.PACScore()
    with pytest.raises(ValueError, match="batch_padding='sideways'"):
        tm.EMScore(batch_padding="sideways")
    with pytest.raises(ValueError, match="reduction"):
        tm.WEmbSim(reduction="median")


def test_pacscore_refuses_references_in_some_updates_only(data):
    metric = torchmetric("pacscore")
    metric.update(data["preds"][:3], images=data["images"][:3], references=data["references"][:3])
    with pytest.raises(ValueError, match="has no references but the 3 predictions before it"):
        metric.update(data["preds"][3:5], images=data["images"][3:5])


def test_emscore_refuses_videos_in_some_updates_only(data):
    metric = torchmetric("emscore")
    metric.update(data["preds"][:3], videos=data["videos"][:3], references=data["references"][:3])
    with pytest.raises(
        ValueError,
        match="gives references only but the 3 predictions before it were given videos and references",
    ):
        metric.update(data["preds"][3:5], references=data["references"][3:5])


def test_compute_before_any_update_is_an_error_naming_the_metric():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchmetrics' own "compute before update" warning
        with pytest.raises(ValueError, match="WMD: no predictions were scored"):
            torchmetric("wmd").compute()
        with pytest.raises(ValueError, match="EMScore: no predictions were kept"):
            torchmetric("emscore").compute()


def test_emscore_texts_come_back_from_the_byte_states_exactly():
    preds = ["un cercle rouge à gauche", "ein Quadrat 🟥 oben", "a red circle on the left"]
    refs = [["cercle rouge, côté gauche"], ["Quadrat oben", "ein rotes Quadrat"], ["a red circle"]]
    metric = torchmetric("emscore")
    metric.update(preds[:2], references=refs[:2])
    metric.update(preds[2:], references=refs[2:])
    kept = metric._inputs()
    assert kept["predictions"] == preds and kept["references"] == refs and kept["video_embeds"] is None
    want = capeval.EMScore(**options("emscore"))(preds, references=refs)
    _close(metric.per_sample(), want["scores"])


def test_emscore_of_video_files_signs_pyav_as_the_callable_does(tmp_path, data):
    from capeval.clip.video import write_video

    paths = [str(write_video(tmp_path / f"clip{i}.mp4", data["videos"][i])) for i in range(3)]
    metric = torchmetric("emscore")
    metric.update(data["preds"][:2], videos=paths[:2])
    metric.update(data["preds"][2:3], videos=paths[2:])
    want = capeval.EMScore(**options("emscore"))(data["preds"][:3], videos=paths)
    got = metric.results()
    assert "|av=" in want["signature"] and got["signature"] == want["signature"]
    _close(got["scores"], want["scores"])


def test_capeval_torchmetrics_imports_without_a_warning_and_names_itself():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        package = importlib.import_module("capeval.torchmetrics")
        from capeval.torchmetrics import EMScore
    assert package.__spec__.name == "capeval.torchmetrics" and capeval.torchmetrics is package
    assert EMScore is package.EMScore and issubclass(EMScore, package.CapevalMetric)
    assert EMScore.__module__ == "capeval.torchmetrics.video_metrics"
