"""A Hub model the local cache lacks, on a machine without network: one bounded question to the Hub, no retry, and
a refusal that says what to do in the words of the interface it came from (``model=`` in Python, ``--model`` on the
command line), names the shapes CLIP that ships with capeval (it loads offline), and names HF_HUB_OFFLINE only
when the user set it.

No network is played by a name lookup that fails as it does on a machine without DNS (counted: each retry of
huggingface_hub would look the name up again, after a back-off sleep, recorded instead of slept); the Hub answering by a local HTTP server; the local Hugging Face
cache by an empty temporary folder. How long each refusal takes is measured by ``scripts/bench_module_loading.py
--sections models``, not here.
"""

from __future__ import annotations

import pickle
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

import capeval
from capeval.cli import main
from capeval.clip.backbones import DEFAULT_MODEL, clear_cache, load_backbone
from capeval.clip.model_sources import HubModelUnavailableError, shipped_shapes_clip
from capeval.shapes import shapes_clip_path


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    """An empty Hugging Face cache: the default model is not in it."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    clear_cache()
    return cache


@pytest.fixture
def online(monkeypatch, empty_cache):
    """The Hub switched on, as on a user's machine where no offline variable is set (conftest sets them)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def no_dns(monkeypatch, online):
    """Name lookups fail as on a machine without network; returns the hosts looked up."""
    lookups = []

    def fail(host, *args, **kwargs):
        lookups.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    return lookups


def _hub_answering(status: int, monkeypatch, error_code: str | None = None) -> list[str]:
    """A local "Hub" answering every request with ``status`` (and the Hub's ``X-Error-Code`` header), made
    huggingface_hub's endpoint; returns the requests."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_response(status)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(
        hub_constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        hub_constants.ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}",
    )
    return seen


def test_without_network_the_default_model_fails_after_one_question_to_the_hub_without_retries(
    no_dns, monkeypatch
):
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)  # huggingface_hub's back-off between retries sleeps
    with pytest.raises(HubModelUnavailableError) as err:
        capeval.CLIPScore(device="cpu")
    # huggingface_hub's own download looked the name up six times (five retries with back-off: about 25 s).
    assert len(no_dns) == 1, no_dns
    assert waits == []
    assert isinstance(err.value, OSError)
    assert f"model '{DEFAULT_MODEL}' could not be loaded: it is not in the local Hugging Face cache and the Hub " \
        "could not be reached (" in str(err.value)  # fmt: skip


def test_the_python_refusal_names_model_equals_and_the_shapes_clip_and_no_variable_the_user_did_not_set(
    no_dns,
):
    with pytest.raises(OSError) as err:
        load_backbone(DEFAULT_MODEL, device="cpu")
    message = str(err.value)
    assert "Either run once with network access, so it is downloaded into the cache, or pass model= a local CLIP " \
        "folder (saved with CLIPModel.save_pretrained, with its tokenizer files)" in message  # fmt: skip
    assert message.endswith(f"model={str(shapes_clip_path())!r}")
    assert "HF_HUB_OFFLINE" not in message and "--model" not in message


def test_with_hf_hub_offline_set_the_refusal_names_it_and_asks_the_hub_nothing(monkeypatch, empty_cache):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lookups = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: lookups.append(a[0]))
    with pytest.raises(HubModelUnavailableError, match=r"not in the local Hugging Face cache and HF_HUB_OFFLINE=1 "
                       r"is set\. Either run once with network access and without HF_HUB_OFFLINE, so it is downloaded "
                       r"into the cache, or pass model= a local CLIP folder") as err:  # fmt: skip
        load_backbone("openai/clip-vit-large-patch14-not-cached", device="cpu")
    assert str(err.value).endswith(f"model={str(shapes_clip_path())!r}")
    assert lookups == []


def test_a_hub_that_answers_is_asked_once_then_its_answer_decides(online, monkeypatch):
    seen = _hub_answering(404, monkeypatch, error_code="RepoNotFound")
    with pytest.raises(
        ValueError, match="unknown model 'org/no-such-clip': no such repository on the Hugging Face Hub"
    ):
        load_backbone("org/no-such-clip", device="cpu")
    # The question, then the download's own request: an answer is not retried.
    assert seen == ["HEAD /org/no-such-clip/resolve/main/config.json"] * 2


def test_a_failing_hub_is_refused_at_once_naming_its_answer(online, monkeypatch):
    seen = _hub_answering(503, monkeypatch)
    with pytest.raises(HubModelUnavailableError, match="not in the local Hugging Face cache and the Hub answered 503 "
                       "for it. Either run once with network access"):  # fmt: skip
        load_backbone("org/overloaded-hub", device="cpu")
    assert len(seen) == 1  # huggingface_hub's download would retry a 503 five times


def test_the_refusal_keeps_both_wordings_through_pickling(no_dns):
    with pytest.raises(HubModelUnavailableError) as err:
        load_backbone(DEFAULT_MODEL, device="cpu")
    copy = pickle.loads(pickle.dumps(err.value))
    assert (str(copy), copy.command_line) == (str(err.value), err.value.command_line)


def test_the_shapes_clip_the_refusal_names_loads_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert shipped_shapes_clip() == shapes_clip_path()
    assert load_backbone(str(shipped_shapes_clip()), device="cpu").model_id == "shapes-clip"


def _command(kind: str, repo_root, tmp_path) -> list[str]:
    shapes = repo_root / "examples" / "shapes"
    if kind == "score":
        return ["score", str(shapes / "candidates.json"), str(shapes / "images")]
    return ["corpus", str(shapes / "pairs.jsonl"), "--output", str(tmp_path / "scored")]


@pytest.mark.parametrize("kind", ["score", "corpus"])
def test_the_command_line_names_the_model_flag_and_the_shapes_clip_without_network(
    kind, no_dns, repo_root, tmp_path, capsys
):
    assert main(_command(kind, repo_root, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"capeval: error: model '{DEFAULT_MODEL}' could not be loaded: it is not in the local "
    )
    assert "or pass --model a local CLIP folder (saved with CLIPModel.save_pretrained" in err
    assert err.rstrip().endswith(f"--model {shapes_clip_path()}")
    assert "model=" not in err and "HF_HUB_OFFLINE" not in err
    assert len(no_dns) == 1


@pytest.mark.parametrize("kind", ["score", "corpus"])
def test_the_command_line_with_hf_hub_offline_set_names_the_model_flag_and_the_shapes_clip(
    kind, monkeypatch, empty_cache, repo_root, tmp_path, capsys
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(_command(kind, repo_root, tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"model '{DEFAULT_MODEL}' " in err and "HF_HUB_OFFLINE=1 is set" in err
    assert err.rstrip().endswith(f"--model {shapes_clip_path()}") and "model=" not in err


def test_a_benchmark_run_without_network_reports_the_model_flag_and_the_shapes_clip(no_dns, tmp_path, capsys):
    from capeval.bench.cli import main as bench_main

    fixtures = Path(__file__).parent / "fixtures" / "bench"
    argv = ["run", "vatex_eval", "-m", "emscore", "--data-dir", str(fixtures), "--out", str(tmp_path / "r")]
    assert bench_main([*argv, "--no-progress", "--no-cache"]) == 1  # nothing scored
    err = capsys.readouterr().err
    assert (
        "emscore skipped: failed: HubModelUnavailableError: model 'openai/clip-vit-base-patch32' could not "
        in err
    )
    assert f"--model {shapes_clip_path()}" in err and "model=" not in err
    assert len(no_dns) == 1
