"""Resolving a model enters each capeval module once: ``CLIPScore(model=...)``, traced with ``sys.setprofile`` for
every form a model is named in, enters no capeval module again after it has left it.

A module is left when no frame of it remains on the call stack. A module calling its own functions, or called back
while one of its frames is still on the stack (a loader handing a reader the function that reads), has not left.
Every capeval module is imported before the trace: the path is what resolving a model runs, not a module's first
import. Only capeval's own modules count (not torch's, transformers' or the tests').
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hub_caches import shapes_clip_hub_cache

import capeval
from capeval import CLIPScore
from capeval.clip.backbones import clear_cache
from capeval.shapes import shapes_clip_path

PACKAGE = os.path.dirname(capeval.__file__) + os.sep
HUB_ID = "openai/clip-vit-base-patch32"

# Every clip module imported now, so that no module's first import shows up in a trace.
for _module in pkgutil.walk_packages(capeval.clip.__path__, "capeval.clip."):
    importlib.import_module(_module.name)


@dataclass(frozen=True)
class Entry:
    """One entry into a capeval module: none of its frames was on the stack before this call.

    Attributes:
        module: its file under ``capeval/`` (``clip/backbones.py``).
        function: the function entered.
        caller: the capeval module it was entered from (``None``: from outside capeval).
        again: the module had been entered and left before.
    """

    module: str
    function: str
    caller: str | None
    again: bool


def _module(filename: str) -> str | None:
    return filename[len(PACKAGE) :] if filename.startswith(PACKAGE) else None


def module_entries(call: Callable[[], object]) -> list[Entry]:
    """The entries into capeval modules while ``call()`` runs, in order, each marked when it enters a module again
    after leaving it."""
    depth: Counter[str] = Counter()
    left: set[str] = set()
    stack: list[
        str | None
    ] = []  # the module of each frame entered since the trace began (None: not capeval's)
    entries: list[Entry] = []

    def profile(frame, event, arg):
        if event == "call":
            module = _module(frame.f_code.co_filename)
            caller = next((m for m in reversed(stack) if m is not None), None)
            stack.append(module)
            if module is not None:
                if depth[module] == 0:
                    entries.append(Entry(module, frame.f_code.co_name, caller, module in left))
                depth[module] += 1
        elif event == "return" and stack:  # a return (or an exception) out of a frame the trace saw begin
            module = stack.pop()
            if module is not None:
                depth[module] -= 1
                if depth[module] == 0:
                    left.add(module)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return entries


def describe(entries: list[Entry]) -> str:
    """The path, one entry a line, entries of a module already left marked ``AGAIN``."""
    return "\n".join(
        f"{'AGAIN ' if e.again else '      '}{e.module}: {e.function} (from {e.caller or 'outside capeval'})"
        for e in entries
    )


# --- The model forms, each built once ---


def _open_clip_file(root: Path) -> str:
    """A tiny CLIP saved as open_clip saves it, its open_clip_config.json and tokenizer files beside it."""
    from transformers import CLIPModel

    from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
    from capeval.shapes.tiny_clip import build_clip_tokenizer, tiny_clip_config
    from capeval_dev.testing.open_clip_layout import write_open_clip_file

    config = tiny_clip_config(
        hidden_size=128, heads=2, layers=2, image_size=32, patch_size=8, projection_dim=32
    )
    torch.manual_seed(0)
    preprocess = {"mean": list(OPENAI_IMAGE_MEAN), "std": list(OPENAI_IMAGE_STD)}
    path = write_open_clip_file(
        CLIPModel(config).eval(),
        root / "open-clip",
        preprocess_cfg=preprocess,
        tokenizer=build_clip_tokenizer(),
    )
    return str(path)


def _longclip_file(root: Path) -> str:
    """A tiny Long-CLIP in the authors' format (OpenAI's names and a second position table), its tokenizer beside."""
    from transformers import CLIPModel

    from capeval.shapes.tiny_clip import build_clip_tokenizer, tiny_clip_config
    from capeval_dev.testing.open_clip_layout import open_clip_state_dict

    config = tiny_clip_config(
        hidden_size=128, heads=2, layers=2, image_size=32, patch_size=8, projection_dim=32
    )
    config.text_config.max_position_embeddings = 248
    torch.manual_seed(0)
    sd = open_clip_state_dict(CLIPModel(config).eval())
    sd["positional_embedding_res"] = sd["positional_embedding"].clone()
    folder = root / "longclip"
    folder.mkdir()
    torch.save(sd, folder / "longclip-B.pt")
    build_clip_tokenizer().save_pretrained(folder)
    return f"longclip:{folder / 'longclip-B.pt'}"


def _shapes_objects():
    from transformers import CLIPModel, CLIPProcessor

    path = str(shapes_clip_path())
    return CLIPModel.from_pretrained(path, dtype=torch.float32), CLIPProcessor.from_pretrained(path)


def _shapes_parts():
    model, processor = _shapes_objects()
    return model, processor.tokenizer, processor.image_processor


def _siglip_folder(root: Path) -> str:
    from capeval_dev.testing.tiny_families import build_tiny_family

    return str(build_tiny_family("siglip", root / "siglip"))


def _known_origin_pair():
    from capeval.shapes.tiny_clip import build_tiny_clip

    model, tokenizer = build_tiny_clip(seed=3)
    model.config._name_or_path = HUB_ID  # a CLIPModel of known origin: no image processor needed
    return model, tokenizer


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``form -> model=`` value, each built the first time a test asks for it."""
    root = tmp_path_factory.mktemp("model-forms")
    builders = {
        "transformers folder": lambda: str(shapes_clip_path()),
        "Hub id in the local cache": lambda: HUB_ID,
        "(model, processor)": _shapes_objects,
        "(model, tokenizer, image_processor)": _shapes_parts,
        "(model, tokenizer) of a known origin": _known_origin_pair,
        "SigLIP folder": lambda: _siglip_folder(root),
        "OpenCLIP file with its sidecar": lambda: _open_clip_file(root),
        "Long-CLIP file": lambda: _longclip_file(root),
    }
    built: dict[str, object] = {}

    def model(form: str):
        if form not in built:
            built[form] = builders[form]()
        return built[form]

    model.hub_cache = shapes_clip_hub_cache(root)
    # Once untraced: transformers imports its CLIP classes on first use, which is no part of the path and, traced,
    # costs seconds.
    CLIPScore(model=str(shapes_clip_path()), device="cpu")
    clear_cache()
    return model


FORMS = [
    "transformers folder",
    "Hub id in the local cache",
    "(model, processor)",
    "(model, tokenizer, image_processor)",
    "(model, tokenizer) of a known origin",
    "SigLIP folder",
    "OpenCLIP file with its sidecar",
    "Long-CLIP file",
]


@pytest.mark.parametrize("form", FORMS)
def test_resolving_a_model_enters_no_capeval_module_again_after_leaving_it(form, models, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(models.hub_cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(models.hub_cache))
    model = models(form)
    clear_cache()  # the whole path: a cached backbone would skip it
    try:
        entries = module_entries(lambda: CLIPScore(model=model, device="cpu"))
    finally:
        clear_cache()
    assert {"clipscore.py", "clip/backbones.py"} <= {e.module for e in entries}, describe(entries)
    again = sorted({e.module for e in entries if e.again})
    assert not again, (
        f"CLIPScore(model=<{form}>) entered {', '.join(again)} again after leaving:\n" + describe(entries)
    )


def test_a_module_called_back_while_on_the_stack_is_not_entered_again_but_one_called_after_it_left_is(
    tmp_path,
):
    from capeval.clip.checkpoints import files
    from capeval.clip.devices import resolve_device, resolve_dtype

    (tmp_path / "model.safetensors").write_bytes(b"")  # safetensors weights: no pickled weights to read first

    def read():
        files.check_finite([("w", torch.zeros(1))], "a layer")  # back into files, whose frame is on the stack
        return torch.nn.Linear(2, 2)

    entries = module_entries(lambda: files.read_model_weights(tmp_path, read, "a layer", "re-save it"))
    assert [(e.module, e.again) for e in entries] == [("clip/checkpoints/files.py", False)]
    entries = module_entries(lambda: (resolve_device("cpu"), resolve_dtype("float32")))
    assert [(e.module, e.function, e.again) for e in entries] == [
        ("clip/devices.py", "resolve_device", False),
        ("clip/devices.py", "resolve_dtype", True),
    ]
