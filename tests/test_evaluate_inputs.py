"""What capeval's evaluate modules (``evaluate.load("metrics/<name>")`` from the repo root) do before evaluate
stores their inputs (capeval.integrations.evaluate_inputs): what evaluate would store or split is refused by
name first, missing references are named, options are checked at compute, and one module object serves several
threads."""

from __future__ import annotations

import copy
import math
import pickle
from pathlib import Path

import evaluate
import numpy as np
import pytest
from PIL import Image

from tests.threads import run_together

REPO = Path(__file__).resolve().parents[1]


ALL_MODULES = ["clipscore", "refclipscore", "pacscore", "wmd", "wembsim", "emscore"]


WITH_REFERENCES = ["refclipscore", "pacscore", "wmd", "wembsim", "emscore"]


NEED_REFERENCES = ["refclipscore", "wmd", "wembsim"]


PREDICTIONS = ["a dark image", "a bright image", "a grey image"]


REFERENCES = [["a black picture"], ["a white picture", "snow"], ["a grey picture"]]


@pytest.fixture(scope="module")
def modules():
    return {name: evaluate.load(str(REPO / "metrics" / name)) for name in ALL_MODULES}


@pytest.fixture(scope="module")
def compute_options(tiny_clip_dir):
    """Per module, the compute keywords that make its inputs complete (images, a model or checkpoint)."""
    images = [Image.fromarray(np.full((24, 24, 3), c, dtype=np.uint8)) for c in (20, 230, 128)]
    model = {"model": str(tiny_clip_dir), "device": "cpu"}
    return {
        "clipscore": {"images": images, **model},
        "refclipscore": {"images": images, **model},
        "pacscore": {"images": images, "checkpoint": str(tiny_clip_dir), "device": "cpu"},
        "wmd": {},
        "wembsim": {},
        "emscore": model,
    }


def _compute(module, options, name, **inputs):
    kwargs = dict(inputs)
    if name not in WITH_REFERENCES:
        kwargs.pop("references", None)
    return module.compute(**kwargs, **options[name])


# --- A string where a list belongs, through evaluate's own input path ---


@pytest.mark.parametrize("name", ALL_MODULES)
def test_a_bare_string_as_predictions_is_refused_not_scored_character_by_character(
    modules, compute_options, name
):
    # evaluate would store "dog" as the three captions "d", "o", "g" and score them against three images.
    for bare in ("dog", b"dog"):
        with pytest.raises(TypeError, match="predictions must be a list of strings, got (str|bytes)"):
            _compute(modules[name], compute_options, name, predictions=bare, references=REFERENCES)


@pytest.mark.parametrize("name", ALL_MODULES)
def test_a_non_string_caption_anywhere_in_the_list_is_refused_not_turned_into_text(
    modules, compute_options, name
):
    # evaluate checks the first item only and stores 3 as the caption "3".
    with pytest.raises(TypeError, match="prediction 2 is int"):
        _compute(
            modules[name],
            compute_options,
            name,
            predictions=["a dog", "a cat", 3],
            references=REFERENCES,
        )


@pytest.mark.parametrize("name", WITH_REFERENCES)
def test_a_string_in_place_of_a_reference_list_is_refused_naming_its_index(modules, compute_options, name):
    with pytest.raises(TypeError, match="references 1 is a string; expected a list of reference strings"):
        _compute(
            modules[name],
            compute_options,
            name,
            predictions=PREDICTIONS,
            references=[["a black picture"], "a white picture", ["a grey picture"]],
        )
    with pytest.raises(TypeError, match="references must be a list of lists of strings, got str"):
        _compute(
            modules[name],
            compute_options,
            name,
            predictions=PREDICTIONS,
            references="a white picture",
        )
    with pytest.raises(TypeError, match="reference 1 of item 0 is int"):
        _compute(
            modules[name],
            compute_options,
            name,
            predictions=PREDICTIONS,
            references=[["a black picture", 5], ["snow"], ["grey"]],
        )


@pytest.mark.parametrize("name", ALL_MODULES)
def test_add_batch_and_add_refuse_bad_input_and_store_nothing(modules, compute_options, name):
    module = modules[name]
    with pytest.raises(TypeError, match="predictions must be a list of strings, got str"):
        module.add_batch(predictions="xy", references=[["x"], ["y"]])
    with pytest.raises(TypeError, match="prediction must be a string .one caption., got list"):
        module.add(prediction=["a dog", "a cat"], reference=["a dog"])
    if name in WITH_REFERENCES:
        with pytest.raises(TypeError, match="reference is a string; expected a list of reference strings"):
            module.add(prediction="a dog", reference="a dog")
    # Nothing of the refused calls was stored: the stream holds the good items only (images stream with them).
    options = dict(compute_options[name])
    images = options.pop("images", None)
    module.add_batch(
        predictions=PREDICTIONS[:2],
        references=REFERENCES[:2],
        **({"images": images[:2]} if images else {}),
    )
    module.add(
        prediction=PREDICTIONS[2],
        reference=REFERENCES[2],
        **({"images": images[2]} if images else {}),
    )
    streamed = module.compute(**options)
    direct = _compute(module, compute_options, name, predictions=PREDICTIONS, references=REFERENCES)
    assert streamed["scores"] == pytest.approx(direct["scores"], abs=1e-6)
    assert len(streamed["scores"]) == 3


def test_numpy_arrays_of_captions_are_still_accepted(modules, compute_options):
    module = modules["wmd"]
    as_array = module.compute(predictions=np.array(PREDICTIONS), references=REFERENCES)
    as_list = module.compute(predictions=PREDICTIONS, references=REFERENCES)
    assert as_array["scores"] == as_list["scores"]


# --- A caption without visible text is refused by add as by add_batch ---


def test_add_refuses_a_caption_without_visible_text_like_add_batch_does():
    module = evaluate.load("metrics/wmd")
    for caption in ("", "   ", "\u200b\u200d", "\x00"):
        with pytest.raises(ValueError, match="prediction is an empty caption"):
            module.add(prediction=caption, reference=["a dog"])


# --- Missing references are named; optional ones may be left out ---


@pytest.mark.parametrize("name", NEED_REFERENCES)
def test_references_none_is_a_value_error_naming_references(modules, compute_options, name):
    with pytest.raises(
        ValueError, match="needs references= .one list of reference captions per prediction., got None"
    ):
        modules[name].compute(predictions=PREDICTIONS, references=None, **compute_options[name])


@pytest.mark.parametrize("name", ["pacscore", "emscore"])
def test_modules_with_optional_references_still_score_without_them(modules, compute_options, name):
    options = dict(compute_options[name])
    if name == "emscore":
        frames = [np.full((24, 24, 3), c, dtype=np.uint8) for c in (20, 230)]
        options["videos"] = [frames, frames, frames]
    result = modules[name].compute(predictions=PREDICTIONS, **options)
    assert len(result["scores"]) == 3


# --- Options are checked at compute, before any work ---


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore"])
@pytest.mark.parametrize("w", [math.nan, math.inf, 0.0, -1.0])
def test_compute_refuses_a_non_finite_or_non_positive_w(modules, compute_options, name, w):
    with pytest.raises(ValueError, match=r"w must be a positive number \(finite, > 0\)"):
        _compute(
            modules[name],
            compute_options,
            name,
            predictions=PREDICTIONS,
            references=REFERENCES,
            w=w,
        )


@pytest.mark.parametrize("name", ["clipscore", "wmd"])
def test_a_compute_refused_for_an_option_keeps_the_streamed_inputs_for_the_next(
    modules, compute_options, name
):
    # Refused before evaluate reads its stored batches: nothing is lost, and the next compute scores them.
    module = modules[name]
    options = dict(compute_options[name])
    images = options.pop("images", None)
    module.add_batch(predictions=PREDICTIONS, references=REFERENCES, **({"images": images} if images else {}))
    bad = {"w": -1.0} if name == "clipscore" else {"sigma": -1.0}
    with pytest.raises(ValueError, match="must be a positive number"):
        module.compute(**options, **bad)
    streamed = module.compute(**options)
    direct = _compute(module, compute_options, name, predictions=PREDICTIONS, references=REFERENCES)
    assert streamed["scores"] == pytest.approx(direct["scores"], abs=1e-6)


@pytest.mark.parametrize("sigma", [math.nan, math.inf, -1.0])
def test_wmd_compute_refuses_a_non_finite_or_non_positive_sigma(modules, sigma):
    with pytest.raises(ValueError, match="sigma must be a positive number"):
        modules["wmd"].compute(predictions=PREDICTIONS, references=REFERENCES, sigma=sigma)


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore", "emscore"])
@pytest.mark.parametrize(
    ("option", "error", "message"),
    [
        ({"batch_size": "64"}, TypeError, "batch_size must be an int >= 1, got str"),
        ({"device": "meta"}, ValueError, "device 'meta' holds shapes, not numbers"),
        ({"dtype": "int8"}, ValueError, "unsupported dtype 'int8'"),
    ],
)
def test_compute_refuses_a_bad_shared_option_by_name(modules, compute_options, name, option, error, message):
    options = {**compute_options[name], **option}
    with pytest.raises(error, match=message):
        modules[name].compute(predictions=PREDICTIONS, references=REFERENCES, **options)


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore"])
def test_compute_refuses_a_prefix_holding_the_signature_separator(modules, compute_options, name):
    with pytest.raises(ValueError, match=r"prefix 'A photo \| depicts' contains '\|'"):
        _compute(
            modules[name],
            compute_options,
            name,
            predictions=PREDICTIONS,
            references=REFERENCES,
            prefix="A photo | depicts",
        )


def test_emscore_compute_refuses_an_idf_table_with_string_keys(modules, compute_options):
    with pytest.raises(TypeError, match="idf key '320' is str"):
        modules["emscore"].compute(
            predictions=PREDICTIONS,
            references=REFERENCES,
            idf={"320": 1.0},
            **compute_options["emscore"],
        )


def test_a_compute_that_fails_in_the_metric_leaves_no_cache_file_or_lock_behind(compute_options, tmp_path):
    # evaluate cleans up only after a _compute that returns: the failed call's Arrow file stayed, locked, and every
    # later compute of the metric in the process waited a second for that lock before taking another file.
    def load():
        return evaluate.load(str(REPO / "metrics" / "emscore"), cache_dir=str(tmp_path))

    with pytest.raises(TypeError, match="idf key '320' is str"):
        load().compute(
            predictions=PREDICTIONS, references=REFERENCES, idf={"320": 1.0}, **compute_options["emscore"]
        )
    assert not list(tmp_path.rglob("*.arrow"))
    module = load()
    assert (
        len(
            module.compute(predictions=PREDICTIONS, references=REFERENCES, **compute_options["emscore"])[
                "scores"
            ]
        )
        == 3
    )
    assert module.experiment_id == "default_experiment"  # its own file, not another one after a wait


# --- One module object serves several threads ---


@pytest.mark.parametrize("name", ALL_MODULES)
def test_four_threads_computing_on_one_module_each_get_the_sequential_result(compute_options, name):
    module = evaluate.load(str(REPO / "metrics" / name))

    def call():
        return _compute(module, compute_options, name, predictions=PREDICTIONS, references=REFERENCES)

    sequential = call()
    results = run_together(call)
    assert all(isinstance(r, dict) for r in results), results
    assert [r["scores"] for r in results] == [sequential["scores"]] * 4
    # Later calls work (evaluate's per-object writer and cache file were never torn down under a call).
    assert call()["scores"] == sequential["scores"]


def test_a_guarded_module_still_pickles_and_copies_before_use():
    # evaluate keeps a module picklable until its first call (then it holds file locks); the lock added here
    # must not change that.
    module = evaluate.load(str(REPO / "metrics" / "wmd"))
    for clone in (pickle.loads(pickle.dumps(module)), copy.deepcopy(module)):
        result = clone.compute(predictions=PREDICTIONS, references=REFERENCES)
        assert len(result["scores"]) == 3
        with pytest.raises(TypeError, match="predictions must be a list of strings, got str"):
            clone.compute(predictions="dog", references=REFERENCES)
