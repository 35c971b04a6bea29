"""Which CLIP a Space runs without the Hub, decided once at start-up, and what its page says about it.

The Hub is played by a local HTTP server (answering 404, or serving the file), a closed port and a socket
that never answers; ``HF_HUB_OFFLINE=1`` (set by conftest) must mean no network call at all, checked by a
spy on the socket layer. The local Hugging Face cache is a temporary folder in the layout huggingface_hub
writes (``models--org--name/refs/main``, ``snapshots/<commit>/``).
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import huggingface_hub
import pytest

from capeval.clip.backbones import DEFAULT_MODEL
from capeval.demo import InputError, build_demo, get_panel
from capeval.demo.builder import visitor_message
from capeval.demo.examples import EXAMPLE_SCENES, candidate_captions, example_image
from capeval.demo.models import (
    CONFIGURED,
    HUB,
    LOCAL_CACHE,
    PAPER_CLIP_S_SENTENCE,
    SHAPES_BANNER,
    SHAPES_CLIP_S,
    SHAPES_FALLBACK,
    ModelPlan,
    banner,
    decide_model,
    loading,
    model_choices,
)
from capeval.shapes import caption, shapes_clip_path

# Any 40 hex digits: the cache's refs/main names the snapshot folder.
COMMIT = "3d74acf9a28c67741b2f4f2ea7635f0aaf6f0268"


@pytest.fixture
def no_network(monkeypatch):
    """Fail the test on any name lookup or connection attempt."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[:2])
        raise OSError("network used in a test that must not use it")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


@pytest.fixture
def online(monkeypatch):
    """The Hub switched on (conftest switches it off), for tests that point it at a local endpoint."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def default_env(monkeypatch, tmp_path):
    """No configured model and an empty Hugging Face cache: the default model is decided from the Hub."""
    monkeypatch.delenv("CAPEVAL_DEMO_MODEL", raising=False)
    monkeypatch.delenv("CAPEVAL_DEMO_CHECKPOINT", raising=False)
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def _fake_hub(status: int):
    """A local "Hub" answering every request with ``status``; returns (server, endpoint, requests seen)."""
    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append((self.command, self.path))
            self.send_response(status)
            if status == 200:
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"0123abcd"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}", seen


def _cache_model(cache, model: str = DEFAULT_MODEL) -> None:
    repo = cache / f"models--{model.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"")


# -- the decision ------------------------------------------------------------------------------------


def test_hub_offline_variable_falls_back_to_the_shapes_clip_without_any_network_call(default_env, no_network):
    plan = decide_model()
    assert plan.source == SHAPES_FALLBACK and plan.spec == str(shapes_clip_path())
    assert plan.reason == (
        f"{DEFAULT_MODEL} is not in the local Hugging Face cache and the Hub is switched off (HF_HUB_OFFLINE=1)"
    )
    assert no_network == []


def test_a_hub_answering_404_falls_back_to_the_shapes_clip_after_one_request(default_env, online):
    server, endpoint, seen = _fake_hub(404)
    try:
        plan = decide_model(endpoint=endpoint, timeout=30)
    finally:
        server.shutdown()
    assert plan.source == SHAPES_FALLBACK and plan.is_shapes
    # The reason is the server's answer, not the timeout: the probe got its reply and did not wait.
    assert plan.reason.endswith("the Hub answered 404 for it")
    assert seen == [("HEAD", f"/{DEFAULT_MODEL}/resolve/main/config.json")]  # one request: no retry


def test_a_closed_port_falls_back_to_the_shapes_clip_with_the_refusal_as_reason(default_env, online):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    plan = decide_model(endpoint=f"http://127.0.0.1:{port}", timeout=30)
    assert plan.source == SHAPES_FALLBACK
    assert "the Hub could not be reached (" in plan.reason and "did not answer" not in plan.reason


def test_a_hub_that_never_answers_is_given_up_after_the_timeout(default_env, online):
    with socket.socket() as silent:  # accepts connections (backlog) but never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        plan = decide_model(endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5)
    assert plan.source == SHAPES_FALLBACK
    assert plan.reason.endswith("the Hub did not answer within 0.5 s")


def test_a_hub_serving_the_model_makes_it_the_default(default_env, online):
    server, endpoint, seen = _fake_hub(200)
    try:
        plan = decide_model(endpoint=endpoint, timeout=30)
    finally:
        server.shutdown()
    assert (plan.spec, plan.source) == (DEFAULT_MODEL, HUB)
    assert [c.key for c in model_choices(plan)] == [DEFAULT_MODEL, "shapes-clip"]
    assert len(seen) == 1


def test_a_model_in_the_local_cache_is_chosen_without_asking_the_hub(default_env, no_network):
    _cache_model(default_env)
    plan = decide_model()
    assert (plan.spec, plan.source) == (DEFAULT_MODEL, LOCAL_CACHE)
    assert banner(plan) is None
    assert no_network == []


def test_a_cache_with_a_config_but_no_weights_does_not_count(default_env, no_network):
    _cache_model(default_env)
    (
        default_env / "models--openai--clip-vit-base-patch32" / "snapshots" / COMMIT / "model.safetensors"
    ).unlink()
    assert decide_model().source == SHAPES_FALLBACK


def test_a_configured_model_is_used_as_is_with_the_shapes_clip_beside_it(
    default_env, monkeypatch, tiny_clip_dir, no_network
):
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    plan = decide_model()
    assert (plan.spec, plan.source, plan.default_available) == (str(tiny_clip_dir), CONFIGURED, False)
    assert [(c.key, c.spec) for c in model_choices(plan)] == [
        ("configured", str(tiny_clip_dir)),
        ("shapes-clip", str(shapes_clip_path())),
    ]
    assert banner(plan) is None


# -- what the page says --------------------------------------------------------------------------------


def _clipscore_panel(plan: ModelPlan):
    panel = get_panel("clipscore")
    panel.model_plan = plan  # the decision, made once, is what the panel reads
    return panel


def test_the_fallback_banner_says_the_model_is_the_shapes_clip_and_why(default_env, no_network):
    plan = decide_model()
    text = _clipscore_panel(plan).banner()
    assert text.startswith(SHAPES_BANNER)
    assert "has no copy of the paper's CLIP (openai/clip-vit-base-patch32) and could not download it" in text
    # The technical reason is for the server's log: a visitor sees no resolver error or errno.
    assert plan.reason not in text and "Errno" not in text and "Name or service" not in text


def test_the_caption_box_suggests_captions_the_model_in_use_knows(tiny_clip_dir):
    from capeval.demo.models import placeholder_captions
    from capeval.shapes.scenes import all_captions

    shapes = placeholder_captions(ModelPlan(str(shapes_clip_path()), SHAPES_FALLBACK, "offline"))
    assert set(shapes.splitlines()) <= set(all_captions())
    assert "dog" in placeholder_captions(
        ModelPlan("openai/clip-vit-base-patch32", "hub", "the Hub serves it")
    )


def test_a_configured_shapes_clip_shows_the_banner_without_a_fallback_reason(monkeypatch):
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(shapes_clip_path()))
    assert _clipscore_panel(decide_model()).banner() == SHAPES_BANNER


def test_the_clipscore_header_states_the_scale_of_the_model_in_use(tiny_clip_dir):
    shapes = _clipscore_panel(ModelPlan(str(shapes_clip_path()), SHAPES_FALLBACK, "offline")).header()
    assert PAPER_CLIP_S_SENTENCE not in shapes
    assert "the right caption of a drawing scores 2.35 to 2.48" in shapes
    assert "colour, shape or position wrong 0.00 to 2.05 (median 1.57)" in shapes
    paper = _clipscore_panel(ModelPlan(DEFAULT_MODEL, LOCAL_CACHE, "cached")).header()
    assert PAPER_CLIP_S_SENTENCE in paper and "drawing" not in paper
    other = _clipscore_panel(ModelPlan(str(tiny_clip_dir), CONFIGURED, "set")).header()
    assert PAPER_CLIP_S_SENTENCE not in other
    assert f"typical values depend on the model ({tiny_clip_dir.name} here)" in other


def test_the_stated_shapes_ranges_hold_on_the_demo_examples():
    import capeval

    scorer = capeval.CLIPScore(model=str(shapes_clip_path()))
    for scene in EXAMPLE_SCENES:
        captions = candidate_captions(scene)
        scores = scorer(captions, images=[str(example_image(scene))] * len(captions))["scores"]
        for text, score in zip(captions, scores, strict=True):
            low, _, high = SHAPES_CLIP_S["right" if text == caption(scene) else "wrong"]
            assert low - 1e-3 <= score <= high + 1e-3, (text, score)


def test_the_offline_space_shows_the_banner_and_logs_the_fallback_at_start(default_env, no_network, caplog):
    with caplog.at_level("WARNING", logger="capeval.demo.models"):
        demo = build_demo("clipscore")
    shown = {getattr(b, "elem_id", None): getattr(b, "value", None) for b in demo.blocks.values()}
    assert SHAPES_BANNER in shown["demo-banner"]
    assert "the right caption of a drawing scores" in shown["demo-header"]
    assert (
        f"capeval demo clipscore runs {shapes_clip_path()} (shapes fallback: {DEFAULT_MODEL}" in caplog.text
    )
    assert no_network == []


def test_the_emscore_space_falls_back_too_and_pac_s_does_not(default_env, no_network):
    assert get_panel("emscore").banner().startswith(SHAPES_BANNER)
    pacs = get_panel("pacscore")
    assert pacs.banner() is None
    assert "it has no PAC-S weights, so what it would score is not PAC-S" in pacs.notice()


# -- Score, when the model cannot be had -----------------------------------------------------------------


def test_a_hub_model_out_of_reach_at_score_time_is_refused_at_once_by_name(default_env, no_network, uploads):
    import shutil

    image = str(shutil.copy(example_image(EXAMPLE_SCENES[0]), uploads / "red.png"))
    panel = _clipscore_panel(ModelPlan(DEFAULT_MODEL, HUB, "the Hub served it at start-up", True))
    with pytest.raises(InputError) as err:
        panel.score(image=image, captions="a red circle on the left", model=DEFAULT_MODEL)
    message = visitor_message(err.value)
    assert message == (
        f"Model '{DEFAULT_MODEL}' could not be loaded: {DEFAULT_MODEL} is not in the local Hugging Face cache "
        "and the Hub is switched off (HF_HUB_OFFLINE=1). Choose another model under 'Model and options' "
        "(shapes CLIP (tiny, offline; drawn shapes only)) or try again later."
    )
    assert no_network == []


def test_a_failed_download_becomes_the_visitor_message():
    offered = model_choices(ModelPlan(DEFAULT_MODEL, HUB, "served", True))
    with pytest.raises(
        InputError, match=rf"Model '{DEFAULT_MODEL}' could not be loaded: its download failed"
    ):
        with loading(DEFAULT_MODEL, offered):
            raise OSError("connection reset")


def test_error_messages_keep_hub_ids_and_urls_whole():
    err = OSError(
        f"model '{DEFAULT_MODEL}' failed: see https://huggingface.co/{DEFAULT_MODEL} or /srv/app/x.py"
    )
    assert visitor_message(err) == (
        f"model '{DEFAULT_MODEL}' failed: see https://huggingface.co/{DEFAULT_MODEL} or x.py"
    )


def test_pac_s_weights_on_an_unreachable_hub_are_said_at_start_and_refused_at_once(
    default_env, monkeypatch, no_network, uploads
):
    import shutil

    monkeypatch.setenv("CAPEVAL_DEMO_CHECKPOINT", "someone/pacs-vit-b-32")
    panel = get_panel("pacscore")
    expected = (
        "the PAC-S weights someone/pacs-vit-b-32 are not in the local cache and the Hub is switched off "
        "(HF_HUB_OFFLINE=1)"
    )
    assert panel.notice().startswith(f"**PAC-S cannot score on this server now**: {expected}.")
    image = str(shutil.copy(example_image(EXAMPLE_SCENES[0]), uploads / "red.png"))
    with pytest.raises(InputError, match="PAC-S cannot score on this server now: the PAC-S weights someone"):
        panel.score(image=image, captions="a red circle", checkpoint="configured")
    assert no_network == []


def test_a_converted_pac_s_folder_needs_nothing_from_the_hub(monkeypatch, no_network):
    monkeypatch.setenv("CAPEVAL_DEMO_CHECKPOINT", str(shapes_clip_path()))
    assert get_panel("pacscore").notice() is None


def test_the_text_spaces_never_touch_the_network(online, no_network):
    import capeval

    wmd = get_panel("wmd").score(
        captions="a man rides a horse", references="a person on a horse", vectors="glove"
    )
    wembsim = get_panel("wembsim").score(captions="a dog", references="a puppy", vectors="glove")
    assert no_network == []
    # The packaged GloVe vectors the panels used are the metrics' offline default.
    assert wmd.corpus == pytest.approx(
        capeval.WMD()(["a man rides a horse"], [["a person on a horse"]])["wmd"]
    )
    assert wembsim.corpus == pytest.approx(capeval.WEmbSim()(["a dog"], [["a puppy"]])["wembsim"])
