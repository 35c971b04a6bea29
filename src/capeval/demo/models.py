"""The CLIP a demo runs, decided once when the Space starts, and what the page says about it.

In order: the operator's model (``CAPEVAL_DEMO_MODEL``); else the paper's CLIP (``DEFAULT_MODEL``) when it is in
the local Hugging Face cache or the Hub serves it now (``capeval.clip.hub_probe``: one request, a 2 s bound);
else the tiny shapes CLIP shipped with capeval, under a banner that says its scores mean nothing outside
its world of drawn shapes. The header's sentence on what the scores mean follows the model in use, and a
Hub model that cannot be had at Score time is a message naming it, at once, never a wait through retries.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from capeval.clip.backbones import DEFAULT_MODEL
from capeval.clip.hub_probe import PROBE_TIMEOUT_S, in_local_cache, is_hub_id, probe_hub
from capeval.demo.choices import MODEL_ENV, SHAPES_KEY, Choice, label_of, same_folder, shapes_clip
from capeval.demo.limits import InputError

logger = logging.getLogger(__name__)

CONFIGURED, LOCAL_CACHE, HUB, SHAPES_FALLBACK = "configured", "local cache", "hub", "shapes fallback"
SHAPES_LABEL = "shapes CLIP (tiny, offline; drawn shapes only)"
SHAPES_BANNER = "Demo model trained on drawn shapes; scores mean nothing outside that world."
# CLIP-S (w = 2.5, prefix "A photo depicts") of the shapes CLIP over all 75 scenes of its world drawn at the
# demo's 224 x 224, each with its canonical caption (75) and the three hard negatives of
# capeval.demo.examples.candidate_captions, colour, shape or position wrong (225): (min, median, max), to two
# decimals with the range rounded outward (measured: right 2.3542, 2.4529, 2.4785; wrong 0.0, 1.5733, 2.0447).
# Measured by `python scripts/measure_shapes_clip_s.py` (weights sha256:5b05385a2fd7, capeval 0.1.0,
# transformers 5.23.0, torch 2.13.0, CPU, fp32).
SHAPES_CLIP_S = {"right": (2.35, 2.45, 2.48), "wrong": (0.0, 1.57, 2.05)}
# Hessel et al. 2021 (ViT-B/32): good captions' CLIP-S, as the CLIPScore header has always stated it.
PAPER_CLIP_S_SENTENCE = "with the paper's ViT-B/32 good captions land around 0.7 to 1."


@dataclass(frozen=True)
class ModelPlan:
    """The model a demo starts with, and how it was chosen.

    Attributes:
        spec: Hub id or folder handed to the metric.
        source: ``"configured"``, ``"local cache"``, ``"hub"`` or ``"shapes fallback"``.
        reason: why, one clause (``"openai/clip-vit-base-patch32 is not in the local ... cache and the Hub ..."``).
        default_available: whether ``DEFAULT_MODEL`` can be offered beside a configured model.
    """

    spec: str
    source: str
    reason: str
    default_available: bool = False

    @property
    def is_shapes(self) -> bool:
        return same_folder(self.spec, shapes_clip())


def hub_model_status(
    model: str, endpoint: str | None = None, cache_dir: str | None = None, timeout: float = PROBE_TIMEOUT_S
) -> tuple[str | None, str]:
    """Where a Hub model can be had from now: (``"local cache"``, ``"hub"`` or ``None``, the reason)."""
    if in_local_cache(model, cache_dir):
        return LOCAL_CACHE, f"{model} is in the local Hugging Face cache"
    why = probe_hub(model, timeout=timeout, endpoint=endpoint)
    if why is None:
        return HUB, f"the Hub serves {model}"
    return None, f"{model} is not in the local Hugging Face cache and the Hub {why}"


def decide_model(
    endpoint: str | None = None, cache_dir: str | None = None, timeout: float = PROBE_TIMEOUT_S
) -> ModelPlan:
    """The demo's model, decided from the configuration, the local cache and one quick question to the Hub.

    Args:
        endpoint: the Hub's address (default: ``HF_ENDPOINT``).
        cache_dir: the Hugging Face cache (default: huggingface_hub's).
        timeout: seconds the Hub is given to answer.

    Raises:
        RuntimeError: nothing to run: no configured model, the paper's CLIP out of reach, no shapes CLIP.
    """
    configured = os.environ.get(MODEL_ENV)
    if configured:
        default_available = False
        if configured != DEFAULT_MODEL:
            default_available = hub_model_status(DEFAULT_MODEL, endpoint, cache_dir, timeout)[0] is not None
        return ModelPlan(configured, CONFIGURED, f"{MODEL_ENV}={configured}", default_available)
    source, reason = hub_model_status(DEFAULT_MODEL, endpoint, cache_dir, timeout)
    if source is not None:
        return ModelPlan(DEFAULT_MODEL, source, reason, default_available=True)
    shapes = shapes_clip()
    if shapes is None:
        raise RuntimeError(f"no model to run: {reason}, {MODEL_ENV} is unset and the shapes CLIP is missing")
    return ModelPlan(shapes, SHAPES_FALLBACK, reason)


def log_plan(plan: ModelPlan, metric: str) -> None:
    """Say at start-up which model the demo runs (a warning when it fell back to the shapes CLIP)."""
    level = logging.WARNING if plan.source == SHAPES_FALLBACK else logging.INFO
    logger.log(level, "capeval demo %s runs %s (%s: %s)", metric, plan.spec, plan.source, plan.reason)


def model_choices(plan: ModelPlan) -> list[Choice]:
    """The CLIPs offered, the planned one first; the shapes CLIP is always there when it is installed."""
    if plan.is_shapes:
        out = [Choice(SHAPES_KEY, SHAPES_LABEL, plan.spec)]
    elif plan.source == CONFIGURED:
        out = [Choice("configured", label_of(plan.spec), plan.spec)]
    else:
        out = [Choice(DEFAULT_MODEL, f"{DEFAULT_MODEL} (the paper's CLIP)", DEFAULT_MODEL)]
    if plan.default_available and plan.spec != DEFAULT_MODEL:
        out.append(Choice(DEFAULT_MODEL, f"{DEFAULT_MODEL} (the paper's CLIP)", DEFAULT_MODEL))
    shapes = shapes_clip()
    if shapes is not None and not plan.is_shapes:
        out.append(Choice(SHAPES_KEY, SHAPES_LABEL, shapes))
    return out


def banner(plan: ModelPlan) -> str | None:
    """The warning at the top of the page when the shapes CLIP is the model in use, else ``None``."""
    if not plan.is_shapes:
        return None
    text = SHAPES_BANNER
    if plan.source == SHAPES_FALLBACK:
        # The reason itself (a resolver's errno, a status code) goes to the server's log (log_plan), not to visitors.
        text += (
            f" This server has no copy of the paper's CLIP ({DEFAULT_MODEL}) and could not download it from the "
            "Hugging Face Hub. It runs the tiny CLIP that capeval ships instead, trained on pictures of one "
            'coloured circle, square or triangle: try the examples, or captions such as "a red circle on the left".'
        )
    return text


def placeholder_captions(plan: ModelPlan) -> str:
    """Candidate captions shown greyed out in an empty caption box: ones the model in use can tell apart."""
    if plan.is_shapes:
        return "a red circle on the left\na blue square at the top"
    return "a dog runs on the beach\na cat sleeps on a sofa"


def clip_s_scale_sentence(plan: ModelPlan) -> str:
    """What CLIP-S values mean with the model in use (one sentence of the CLIPScore header)."""
    if plan.is_shapes:
        right, wrong = SHAPES_CLIP_S["right"], SHAPES_CLIP_S["wrong"]
        return (
            f"with the shapes CLIP running here, the right caption of a drawing scores {right[0]:.2f} to "
            f"{right[2]:.2f} and one with its colour, shape or position wrong {wrong[0]:.2f} to {wrong[2]:.2f} "
            f"(median {wrong[1]:.2f})."
        )
    if plan.spec == DEFAULT_MODEL:
        return PAPER_CLIP_S_SENTENCE
    return (
        f"typical values depend on the model ({label_of(plan.spec)} here): compare scores of one model only."
    )


def unavailable_message(spec: str, reason: str, offered: list[Choice]) -> str:
    """What a visitor reads when a Hub model cannot be had: the model, why, and what they can do."""
    others = [c.label for c in offered if c.spec != spec]
    advice = (
        f"Choose another model under 'Model and options' ({', '.join(others)}) or try again later."
        if others
        else "Try again later; the Space's operator can set CAPEVAL_DEMO_MODEL to a local CLIP folder."
    )
    return f"Model '{spec}' could not be loaded: {reason}. {advice}"


def check_loadable(spec: str, offered: list[Choice], timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse at once a Hub model that is neither cached nor served by the Hub now (no retries).

    Raises:
        InputError: naming the model and what the visitor can do.
    """
    if not is_hub_id(spec):
        return
    source, reason = hub_model_status(spec, timeout=timeout)
    if source is None:
        raise InputError(unavailable_message(spec, reason, offered))


@contextlib.contextmanager
def loading(spec: str, offered: list[Choice]):
    """Turn a failed model load (``OSError``: download cut, cache damaged) into the visitor's message."""
    try:
        yield
    except OSError as err:
        if not is_hub_id(spec):
            raise
        reason = f"its download failed ({type(err).__name__})"
        raise InputError(unavailable_message(spec, reason, offered)) from err


def checkpoint_problem(spec: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the PAC-S weights ``spec`` cannot be used on this server now, ``None`` when they can.

    A converted folder is a whole model. The authors' ``.pth`` goes on top of its base CLIP (read from its
    tensors), which must be cached or served by the Hub; weights on the Hub must be cached or served now.
    """
    from huggingface_hub import try_to_load_from_cache

    from capeval.clip.checkpoints.layout import base_model_for
    from capeval.clip.checkpoints.load import checkpoint_geometry
    from capeval.clip.checkpoints.locate import resolve_checkpoint

    if Path(os.path.expanduser(spec)).exists():
        try:
            resolved = resolve_checkpoint(spec)
            if resolved.kind == "model_folder":
                return None
            base = base_model_for(checkpoint_geometry(resolved))
        except (OSError, ValueError) as err:
            return f"the PAC-S weights {label_of(spec)} cannot be read ({type(err).__name__})"
        if not is_hub_id(base):
            return None
        source, reason = hub_model_status(base, timeout=timeout)
        return None if source else f"the PAC-S weights go on top of {base}, and {reason}"
    parts = spec.strip("/").split("/")
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:]) or "config.json"
    if isinstance(try_to_load_from_cache(repo, filename), str):
        return None
    why = probe_hub(repo, timeout=timeout, filename=filename)
    return None if why is None else f"the PAC-S weights {spec} are not in the local cache and the Hub {why}"
