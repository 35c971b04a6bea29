"""Each metric is declared once (``MetricSpec``, beside its callable) and every interface agrees with it.

The spelled-out signatures (the callable's constructor, the evaluate module's ``_compute``, the torchmetrics
``__init__``), the modules' features and their ``_KWARGS_DESCRIPTION``, the signature string and the CLI's choices
are checked against the declarations; a toy metric registered at run time is offered by every interface that
reads the registry (``capeval bench``'s resolver, ``capeval score``, the Trainer hook, the corpus engines).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import evaluate
import numpy as np
import pytest
from PIL import Image

import capeval
from capeval.clipscore import CLIPScore
from capeval.registry import (
    MetricSpec,
    Option,
    Output,
    metric_names,
    register,
    shipped_metrics,
    spec,
    specs,
    unregister,
)

REPO = Path(__file__).resolve().parents[1]
SHIPPED = list(shipped_metrics())
MODULE_INPUTS = {"self", "predictions", "references", "images", "image_embeds", "videos", "video_embeds"}


def _constructor_defaults(cls: type) -> dict:
    """``{keyword: default}`` of a class's constructor, following ``*args, **kwargs`` up the MRO."""
    out: dict = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
                out.setdefault(p.name, p.default)
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return out


# --- The declarations themselves ---


def test_the_registry_holds_the_six_metrics_in_order():
    assert SHIPPED == ["clipscore", "refclipscore", "pacscore", "wembsim", "wmd", "emscore"]
    assert capeval.METRICS == tuple(SHIPPED)


def test_an_unknown_metric_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown metric 'clipscroe'; choose from clipscore, refclipscore"):
        spec("clipscroe")


def test_every_option_names_where_its_default_comes_from():
    for declared in specs().values():
        for option in declared.options:
            assert option.source.strip(), (declared.name, option.name)


def test_a_declaration_refuses_an_unknown_way_of_reading_an_input():
    with pytest.raises(ValueError, match=r"toy: images must be one of \('required', 'optional', 'none'\)"):
        MetricSpec("toy", "Toy", CLIPScore, ("toy", "signature"), (), images="sometimes")


# --- The callables, the modules and torchmetrics agree with them ---


@pytest.mark.parametrize("name", SHIPPED)
def test_the_callable_takes_exactly_the_declared_options_with_their_defaults(name):
    declared = spec(name)
    assert _constructor_defaults(declared.scorer) == declared.defaults()


@pytest.fixture(scope="module")
def modules():
    return {name: evaluate.load(str(REPO / "metrics" / name)) for name in SHIPPED}


@pytest.mark.parametrize("name", SHIPPED)
def test_the_evaluate_module_takes_the_declared_options_and_inputs(modules, name):
    declared = spec(name)
    params = inspect.signature(type(modules[name])._compute).parameters
    options = {n: p.default for n, p in params.items() if n not in MODULE_INPUTS}
    assert set(options) == set(declared.option_names(in_module=True))
    assert options == {n: declared.option(n).default for n in options}
    assert MODULE_INPUTS - {"self"} <= set(params)  # every module takes every input (evaluate.combine)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_evaluate_module_features_and_description_follow_the_declaration(modules, name):
    declared = spec(name)
    module = modules[name]
    expected = {"predictions"} | ({"references"} if declared.reads("references") else set())
    expected |= {declared.media} if declared.media else set()
    assert set(module.features) == expected
    described = module.inputs_description
    for option in declared.option_names(in_module=True):
        assert f"    {option} (" in described, (name, option)
    for key in declared.result_keys:
        assert f"    {key} (" in described, (name, key)


TORCHMETRICS_OWN = {"sync_on_compute", "process_group", "compute_on_cpu"}


@pytest.mark.parametrize("name", SHIPPED)
def test_the_torchmetrics_class_takes_the_declared_options(name):
    import capeval.torchmetrics as tm

    declared = spec(name)
    cls = getattr(tm, declared.scorer.__name__)
    assert cls.name == name
    params = inspect.signature(cls.__init__).parameters
    options = {n: p.default for n, p in params.items() if n != "self" and n not in TORCHMETRICS_OWN}
    assert options == declared.defaults()


# --- The signature carries every declared option that changes the numbers, and no other ---

# A value away from the default for each option a test can vary cheaply; model, checkpoint and vectors (their
# identity) are proven by the backbone and vectors tests.
OTHER_VALUES = {
    "prefix": "A picture of", "w": 3.0, "dtype": "bfloat16", "clip_reference_cosine": True, "sigma": 2.0,
    "normalize_vectors": True, "stopwords": "none", "tokenizer": str.split, "reduction": "max",
    "absolute_cosine": False, "num_frames": 2, "idf": False, "batch_padding": "authors", "batch_size": 2,
    "num_workers": 1, "progress": False, "device": "cpu", "prune": False,
}  # fmt: skip
CASES = [
    (name, option.name) for name in SHIPPED for option in spec(name).options if option.name in OTHER_VALUES
]


@pytest.fixture(scope="module")
def signature_of(tiny_clip_dir):
    from capeval.clip.video import write_video

    image = Image.fromarray(np.full((24, 24, 3), 90, dtype=np.uint8))
    frames = [np.full((24, 24, 3), 40 * i, dtype=np.uint8) for i in range(4)]
    video = str(write_video(Path(tiny_clip_dir).parent / "spec-video.mp4", frames, fps=2))
    base = {
        "clipscore": ({"model": str(tiny_clip_dir)}, {"images": [image]}),
        "refclipscore": ({"model": str(tiny_clip_dir)}, {"images": [image], "references": [["a square"]]}),
        "pacscore": ({"checkpoint": str(tiny_clip_dir)}, {"images": [image], "references": [["a square"]]}),
        "wmd": ({}, {"references": [["a grey square"]]}),
        "wembsim": ({}, {"references": [["a grey square"]]}),
        "emscore": ({"model": str(tiny_clip_dir)}, {"videos": [video], "references": [["a square"]]}),
    }

    def signature(name: str, **changed) -> str:
        options, inputs = base[name]
        return spec(name).scorer(**options, **changed)(["a grey square"], **inputs)["signature"]

    return signature


@pytest.mark.parametrize(("name", "option"), CASES)
def test_an_option_changes_the_signature_exactly_when_it_is_declared_signed(signature_of, name, option):
    declared = spec(name).option(option)
    default = signature_of(name)
    changed = signature_of(name, **{option: OTHER_VALUES[option]})
    assert (changed != default) == declared.signed, (default, changed)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_result_holds_the_declared_keys(signature_of, tiny_clip_dir, name):
    image = Image.fromarray(np.full((24, 24, 3), 90, dtype=np.uint8))
    options = {"checkpoint": str(tiny_clip_dir)} if name == "pacscore" else {}
    if spec(name).families == "clip" and name != "pacscore":
        options["model"] = str(tiny_clip_dir)
    inputs = {"references": [["a grey square"]]} if spec(name).reads("references") else {}
    if spec(name).needs("images"):
        inputs["images"] = [image]
    result = spec(name).scorer(**options)(["a grey square"], **inputs)
    assert set(spec(name).result_keys) <= set(result)


# --- A metric registered at run time is offered everywhere ---


class ToyScore(CLIPScore):
    """CLIP-S with another name: a seventh metric, for the registry's tests."""

    name = "toyscore"


TOY = MetricSpec(
    name="toyscore",
    label="ToyScore",
    scorer=ToyScore,
    result_keys=("toyscore", "scores", "signature"),
    options=spec("clipscore").options,
    images="required",
    outputs=(Output("toyscore", "Toy-S", uses_images=True, note="benchmarks with images"),),
)


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    unregister("toyscore")


def test_a_registered_metric_is_offered_by_every_interface(toy, tiny_clip_dir, tmp_path):
    from capeval.corpus.row_scoring import check_row_metrics
    from capeval.registry import row_image_metrics
    from capeval.scoring.metric_names import groups, resolve_metric
    from capeval.scoring.metric_names import metric_names as bench_names

    assert "toyscore" in metric_names() and "toyscore" not in shipped_metrics()
    assert "toyscore" in bench_names() and "toyscore" in groups()["image"]
    assert "toyscore" in row_image_metrics() and check_row_metrics(["toyscore"]) == ["toyscore"]
    image = Image.fromarray(np.full((24, 24, 3), 90, dtype=np.uint8))
    (bench_metric,) = resolve_metric("toyscore", model=str(tiny_clip_dir), device="cpu")
    direct = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")(["a square"], images=[image])
    assert bench_metric.score(["a square"], images=[image]) == pytest.approx(direct["scores"])

    from transformers import AutoTokenizer

    from capeval.integrations.trainer import make_compute_metrics

    tokenizer = AutoTokenizer.from_pretrained(tiny_clip_dir)
    hook = make_compute_metrics(
        tokenizer, [{"image": image}], metrics=["toyscore"], options={"model": str(tiny_clip_dir)}
    )
    assert list(hook.scorers) == ["toyscore"] and hook.needs_images

    from capeval.scoring.systems import score_systems

    table = score_systems({"a": ["a square"]}, images=[image], metrics=["toyscore"], model=str(tiny_clip_dir))
    assert table.columns() == {"toyscore": "Toy-S"}
    assert table.per_item["a"]["toyscore"] == pytest.approx(direct["scores"])


def test_a_registered_metric_cannot_take_a_shipped_name():
    clash = MetricSpec("clipscore", "Mine", ToyScore, ("clipscore", "signature"), ())
    with pytest.raises(ValueError, match="'clipscore' is one of capeval's metrics; give yours another name"):
        register(clash)


# --- The command line offers the declared metrics ---


def test_the_cli_offers_the_declared_metrics():
    from capeval.cli import build_parser
    from capeval.registry import row_image_metrics

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    install = next(a for a in sub["install-modules"]._actions if a.dest == "metrics")
    assert list(install.choices) == SHIPPED
    corpus_metric = next(a for a in sub["corpus"]._actions if a.dest == "metrics")
    assert list(corpus_metric.choices) == list(row_image_metrics())


def test_every_option_the_modules_share_has_one_meaning():
    # The same option name has the same source-independent meaning everywhere: one rule checks it.
    from capeval.validation import OPTION_RULE_NAMES

    shared = {o.name for s in specs().values() for o in s.options}
    unruled = shared - OPTION_RULE_NAMES
    assert unruled <= {"stopwords", "tokenizer", "reduction", "idf", "batch_padding"}, unruled


def test_options_of_a_run_reach_only_the_metrics_that_declare_them():
    run = {"model": "m", "checkpoint": "weights.pth", "vectors": "glove", "w": 3.0}
    assert spec("clipscore").run_options(run) == {"model": "m", "w": 3.0}  # checkpoint means PAC-S weights
    assert spec("pacscore").run_options(run) == {"model": "m", "checkpoint": "weights.pth", "w": 3.0}
    assert spec("wmd").run_options(run) == {"vectors": "glove"}
    assert isinstance(spec("pacscore").option("checkpoint"), Option)
    with pytest.raises(KeyError, match="wmd has no option 'w'"):
        spec("wmd").option("w")


def test_the_metric_flags_are_declared_options_and_show_the_declared_defaults():
    from capeval.cli import RUN_OPTIONS, build_parser

    declared = {o.name for s in specs().values() for o in s.options if o.run_wide}
    assert set(RUN_OPTIONS) <= declared
    score = next(a for a in build_parser()._actions if a.dest == "command").choices["score"]
    flags = {a.dest: a for a in score._actions}
    assert set(RUN_OPTIONS) <= set(flags)
    assert "2.5: clipscore, refclipscore; 2.0: pacscore" in flags["w"].help
