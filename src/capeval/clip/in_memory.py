"""Model objects the caller holds (the model being trained), scored as they are at each call.

Besides a Hub id or a folder, ``model=`` takes a loaded dual encoder with what prepares its inputs:

- ``(model, processor)``: the model and its transformers processor (``AutoProcessor``: tokenizer and image
  processor), the pair ``from_pretrained`` gives;
- ``(model, tokenizer, image_processor)``: the two separately;
- ``(model, tokenizer)``: only for a ``CLIPModel`` whose config names a checkpoint of known origin
  (``openai/clip-vit-base-patch32``, ...; ``capeval.clip.image_constants``): its image geometry is CLIP's and its
  mean/std come from the origin table. Any other needs its image processor: the constants are never assumed.

Such a model is not ours to change, and it changes between calls:

- nothing is loaded, copied, moved or cast: it is scored on its own device in its own dtype (a ``device=`` or
  ``dtype=`` that differs is refused, naming both, rather than moving a model that is being trained);
- its train/eval modes are left as found: each forward runs in eval mode (dropout off) and the modes of every
  submodule are restored after it, once, when the last of the calls scoring it at the same time (from several
  threads) ends; no gradient is kept (inference mode);
- nothing computed from its outputs is kept across calls: no backbone cache (``load_backbone`` builds a new
  wrapper each time), no corpus embedding cache (``score_corpus`` refuses model objects);
- it is named by a revision over its weights, its config and its tokenizer, ``state-sha256:<12 hex>``
  (``capeval.clip.model_identity``), computed at each call from digests kept per model object and per tokenizer
  until one of them changes; the weights' digest refuses NaN or inf weights (a diverged run), which would otherwise
  come back as NaN scores. What its image processor decides (size, crop, mean/std) is read once, when the metric is
  made, into fields the signature carries.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import torch

from capeval.clip.devices import DTYPES, Placement


def is_model_object(model) -> bool:
    """Whether ``model=`` is a loaded model (with its processor) rather than a Hub id or a folder."""
    return model is not None and not isinstance(model, (str, os.PathLike))


def _is_tokenizer(obj) -> bool:
    from transformers import PreTrainedTokenizerBase

    return isinstance(obj, PreTrainedTokenizerBase)


def _is_image_processor(obj) -> bool:
    from transformers.image_processing_base import ImageProcessingMixin

    return isinstance(obj, ImageProcessingMixin)


def split_model_object(model) -> tuple[torch.nn.Module, object, object | None]:
    """``(module, tokenizer, image_processor or None)`` from the forms ``model=`` takes (module docstring).

    Raises:
        TypeError: a bare model, a tuple of another length, or parts of the wrong kinds, each named.
    """
    forms = (
        "model=(model, processor), model=(model, tokenizer, image_processor) or, for a CLIPModel of known "
        "origin, model=(model, tokenizer)"
    )
    if isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model= got a {type(model).__name__} object without what prepares its inputs: pass {forms} "
            "(transformers' AutoProcessor.from_pretrained gives the processor)"
        )
    if not isinstance(model, (tuple, list)) or len(model) not in (2, 3):
        raise TypeError(
            f"model must be a Hub id, a folder path, or {forms}; got {type(model).__name__}"
            + (f" of {len(model)} items" if isinstance(model, (tuple, list)) else "")
        )
    module, *parts = model
    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"model=(model, ...): the first item must be the loaded model, got {type(module).__name__}"
        )
    if len(parts) == 1:
        part = parts[0]
        if _is_tokenizer(part):
            return module, part, None
        tokenizer = getattr(part, "tokenizer", None)
        image_processor = getattr(part, "image_processor", None)
        if tokenizer is None or not _is_tokenizer(tokenizer):
            raise TypeError(
                f"model=(model, processor): {type(part).__name__} is neither a tokenizer nor a processor with a "
                "tokenizer (transformers' AutoProcessor)"
            )
        if image_processor is not None and not _is_image_processor(image_processor):
            raise TypeError(
                f"model=(model, processor): its image_processor is a {type(image_processor).__name__}, not a "
                "transformers image processor"
            )
        return module, tokenizer, image_processor
    tokenizer, image_processor = parts
    if not _is_tokenizer(tokenizer):
        raise TypeError(
            "model=(model, tokenizer, image_processor): the second item must be a transformers tokenizer, got "
            f"{type(tokenizer).__name__}"
        )
    if not _is_image_processor(image_processor):
        raise TypeError(
            "model=(model, tokenizer, image_processor): the third item must be a transformers image processor, "
            f"got {type(image_processor).__name__}"
        )
    return module, tokenizer, image_processor


def model_object_id(module: torch.nn.Module) -> str:
    """How signatures name a model object: ``memory:CLIPModel(openai/clip-vit-base-patch32)``, the class and the
    checkpoint its config says it started from, a local folder by its name only (what it holds is named by the
    revision, ``capeval.clip.model_identity``)."""
    source = str(getattr(getattr(module, "config", None), "_name_or_path", "") or "")
    if source and (os.path.isabs(source) or source.startswith((".", "~")) or os.path.isdir(source)):
        source = Path(
            os.path.expanduser(source)
        ).name  # a local folder by its name: no machine's path in a signature
    source = source.replace("|", "/")  # '|' separates a signature's fields
    return f"memory:{type(module).__name__}" + (f"({source})" if source else "")


def _placement(module: torch.nn.Module, where: str) -> tuple[torch.device, torch.dtype]:
    """The one device and the one floating-point dtype of a model's parameters.

    Raises:
        ValueError: no parameters, or parameters spread over devices or dtypes (named).
    """
    params = [p for p in module.parameters() if p.is_floating_point()]
    if not params:
        raise ValueError(f"{where} has no floating-point parameters")
    devices = sorted({str(p.device) for p in params})
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
    if len(devices) > 1:
        raise ValueError(
            f"{where} has parameters on {devices}: capeval scores a model that sits on one device"
        )
    if len(dtypes) > 1:
        raise ValueError(f"{where} has parameters in {dtypes}: capeval scores a model in one dtype")
    return params[0].device, params[0].dtype


def check_placement(
    module: torch.nn.Module, placement: Placement, where: str
) -> tuple[torch.device, torch.dtype]:
    """The model's device and dtype, checked against the ``device=``/``dtype=`` options (resolved in ``placement``).

    No device named takes the model's device. The dtype must be the model's: the caller's model is never cast.

    Raises:
        ValueError: a device or dtype that differs from the model's, naming both.
    """
    dev, dt = _placement(module, where)
    if dt not in DTYPES.values():
        raise ValueError(f"{where} holds {dt} weights; capeval scores float32, float16 or bfloat16 models")
    device = placement.asked_device
    if device is not None:
        wanted = placement.device
        same = wanted.type == dev.type and (wanted.index or 0) == (dev.index or 0)
        if not same:
            raise ValueError(
                f"{where} is on {dev} but device={device!r} was asked for: a model object is scored where it is "
                f"(it is not moved); pass device=None or {str(dev)!r}, or move the model first"
            )
    if placement.dtype != dt:
        name = next(k for k, v in DTYPES.items() if v == dt)
        raise ValueError(
            f"{where} holds {name} weights but dtype={placement.asked_dtype!r} was asked for: a model object is scored "
            f"in its own dtype (it is not cast); pass dtype={name!r}"
        )
    return dev, dt


# id(model) -> [calls inside eval_mode, the modes found by the first]: one entry per model object while scored.
_EVAL_USERS: dict[int, list] = {}
_EVAL_LOCK = threading.Lock()


@contextmanager
def eval_mode(module: torch.nn.Module):
    """Run the block with every submodule in eval mode, then give each its own mode back.

    Calls on one model object from several threads share one save: the first to enter records the modes and
    switches to eval, the last to leave restores them. Saving per call would let a second call record the first
    one's eval modes as the model's own, and the first call's restore switch train mode on under the second's
    forward.
    """
    key = id(module)
    with _EVAL_LOCK:
        entry = _EVAL_USERS.get(key)
        if entry is None:
            entry = _EVAL_USERS[key] = [0, [(m, m.training) for m in module.modules()]]
            module.eval()
        entry[0] += 1
    try:
        yield
    finally:
        with _EVAL_LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                del _EVAL_USERS[key]  # the entry holds the module: its id cannot be reused while it is here
                for m, training in entry[1]:
                    m.training = training


def model_object_fields(model, placement: Placement) -> dict:
    """The ``Backbone`` fields of a model object (see the module docstring); ``load_backbone`` builds a new one
    from them on every call, with ``live=True``; it is named at each call (``model_identity.model_object_revision``).
    The family, the tokenizer and the image processor are each asked of their module once.

    Raises:
        TypeError: ``model`` in none of the accepted forms.
        ValueError: a family capeval does not score, a tokenizer that does not fit the model, an image processor
            whose steps capeval does not reproduce, no way to know the image constants, or a device/dtype other
            than the model's.
    """
    from capeval.clip.families import family_and_class
    from capeval.clip.image_constants import model_object_recipe
    from capeval.clip.tokenizer_check import checked_tokenizer

    module, tokenizer, image_processor = split_model_object(model)
    where = f"model object {model_object_id(module)}"
    config = getattr(module, "config", None)
    if config is None:
        raise ValueError(f"{where} has no transformers config: capeval scores transformers models")
    family, model_class = family_and_class(config, where)
    if not isinstance(module, model_class):
        raise ValueError(
            f"{where}: its config is {family.config_class} ({family.name}) but the object is a "
            f"{type(module).__name__}, not a {family.model_class}; pass the whole dual encoder"
        )
    dev, dt = check_placement(module, placement, where)
    text = checked_tokenizer(lambda: tokenizer, family, config, where)
    size, constants = model_object_recipe(where, family, image_processor, config)
    return {
        "model": module,
        "tokenizer": tokenizer,
        "model_id": model_object_id(module),
        "revision": "",  # named at each call (Backbone.refresh), not here: a metric is often built long before
        "device": dev,
        "dtype": dt,
        "image_size": size,
        "image_mean": constants.mean,
        "image_std": constants.std,
        "context_length": text.context_length,
        "origin": constants.origin,
        "family": family,
        "lowercase": text.lowercase,
        "live": True,
    }
