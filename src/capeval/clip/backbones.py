"""Loading CLIP-family backbones once per process, with the device and dtype policy.

A backbone is a transformers ``CLIPModel`` with its tokenizer and the image-preprocessing constants
(input size from its config; mean and std decided by ``capeval.clip.image_constants``: by the weights' origin
where it is known, else by the model's ``preprocessor_config.json``, never assumed). It is identified by the
model id and a revision: the Hub commit for Hub models, for local folders a sha256 prefix over the weights and
every file that decides numbers (config, processor and tokenizer files), so that a score's signature (and every
cache keyed by it) names exactly the files that produced it.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from capeval.clip.checkpoints.files import check_finite, read_model_weights
from capeval.clip.devices import (  # resolve_device, resolve_dtype: re-exported, callers import them here
    DTYPES,
    Placement,
    resolve_device,  # noqa: F401
    resolve_dtype,  # noqa: F401
    resolve_placement,
)
from capeval.clip.families import CLIP, Family, family_and_class
from capeval.clip.image_constants import PREPROCESSOR_FILE, ImageConstants, folder_image_recipe
from capeval.clip.model_sources import (  # model_unavailable: re-exported, callers import it here
    HubModelUnavailableError,
    ModelSource,
    find_model,
    model_unavailable,  # noqa: F401
)
from capeval.clip.tokenizer_check import checked_tokenizer, forget_read_tokenizers

DEFAULT_MODEL = "openai/clip-vit-base-patch32"  # Hessel et al. 2021 report CLIP-S with ViT-B/32
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass(eq=False)
class Backbone:
    """A loaded CLIP model with what encoding needs to use it faithfully.

    Attributes:
        model: the ``CLIPModel`` in eval mode on ``device`` in ``dtype``.
        tokenizer: its CLIP tokenizer.
        model_id: the Hub id, or the name of the local folder it was loaded from (its contents are named by
            ``revision``; the path is left out so that signatures are the same on every machine).
        revision: Hub commit (first 7 hex digits) or ``sha256:`` prefix over the weight files and the files that
            decide numbers (``checkpoints.hashes.weights_sha256``); for a model object, ``state-sha256:`` over its
            weights, config and tokenizer (``model_identity``).
        device: where it runs.
        dtype: its floating-point type.
        image_size: square input size of the vision tower (224 for ViT-B/32).
        image_mean: per-channel normalisation mean.
        image_std: per-channel normalisation std.
        context_length: text positions (77 for every released CLIP).
        weights: free-form tag of extra weights loaded on top (e.g. a PAC-S checkpoint), for signatures.
        origin: the known origin whose constants ``image_mean``/``image_std`` are
            (``laion/CLIP-ViT-L-14-laion2B-s32B-b82K``), or ``None`` when the model's preprocessor config gave them.
        family: the model class and its conventions (``capeval.clip.families``); for families other than CLIP,
            ``image_size`` is a ``ProcessorGeometry`` and ``context_length`` the tokenizer's text length.
        lowercase: captions and the prompt are lower-cased (ASCII) before the tokenizer, because the tokenizer files
            ask for it and the transformers tokenizer does not do it (SigLIP 2: ``tokenizer_check.lower_cases``).
        live: a model object the caller holds (``capeval.clip.in_memory``): scored in eval mode with its modes
            restored, its weights, config and tokenizer named in ``revision`` at each call (``refresh``: their
            digests are kept until they change), the wrapper itself never cached.
    """

    model: torch.nn.Module
    tokenizer: object
    model_id: str
    revision: str
    device: torch.device
    dtype: torch.dtype
    image_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    context_length: int
    weights: str | None = None
    origin: str | None = None
    family: Family = CLIP
    lowercase: bool = False
    live: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        # model_id is written into every signature, whose fields '|' separates. The model= option's own check saw
        # the name as given; a folder reached through a link is named by its target.
        if "|" in self.model_id:
            raise ValueError(
                f"model {self.model_id!r} contains '|', the separator of result signatures: rename it"
            )

    @property
    def name(self) -> str:
        """``model_id@revision``, as written into signatures."""
        if self.live and not self.revision:
            self.refresh()
        return f"{self.model_id}@{self.revision}"

    def refresh(self) -> None:
        """At the start of each metric call: a model object is named as it is now (its weights, config and
        tokenizer change between calls), its weights hashed again and checked for NaN or inf only when they changed
        since the digest kept for that object (``model_identity.model_object_revision``). Loaded models: nothing to
        do."""
        if self.live:
            from capeval.clip.model_identity import model_object_revision

            self.revision = model_object_revision(self.model, self.tokenizer, f"model object {self.model_id}")

    def forward_mode(self):
        """Context of every forward: eval mode for a model object (its modes given back after), else nothing."""
        if not self.live:
            return nullcontext()
        from capeval.clip.in_memory import eval_mode

        return eval_mode(self.model)

    @property
    def image_constants(self) -> ImageConstants:
        return ImageConstants(tuple(self.image_mean), tuple(self.image_std), self.origin)

    def signature_fields(self) -> dict[str, str]:
        """``image_mean``/``image_std`` for a signature when they differ from OpenAI CLIP's, else nothing; for
        families other than CLIP also the family, its image geometry and its text padding."""
        from capeval.clip.families import signature_fields

        return {**self.image_constants.signature_fields(), **signature_fields(self)}

    @property
    def embed_dim(self) -> int:
        from capeval.clip.families import embed_dim

        return embed_dim(self.model.config)

    @property
    def dtype_name(self) -> str:
        return next(k for k, v in DTYPES.items() if v == self.dtype)


_CACHE: dict[tuple, Backbone] = {}
_CACHE_LOCK = threading.Lock()


def write_preprocessor_config(folder: str | os.PathLike, image_size: int, mean: tuple, std: tuple) -> Path:
    """Write CLIP's preprocessing (bicubic shorter-side resize, centre crop, ``mean``/``std``) as the
    ``preprocessor_config.json`` transformers' CLIP folders carry, the file ``load_backbone`` reads back.

    ``mean`` and ``std`` have no default: they are the model's (``Backbone.image_mean``/``image_std``, or
    ``OPENAI_IMAGE_MEAN``/``OPENAI_IMAGE_STD`` for a model trained with OpenAI's), never assumed."""
    cfg = {
        "image_processor_type": "CLIPImageProcessor",
        "do_resize": True,
        "size": {"shortest_edge": image_size},
        "resample": 3,
        "do_center_crop": True,
        "crop_size": {"height": image_size, "width": image_size},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(mean),
        "image_std": list(std),
        "do_convert_rgb": True,
    }
    path = Path(folder) / PREPROCESSOR_FILE
    path.write_text(json.dumps(cfg, indent=2))
    return path


def load_backbone(
    model: str = DEFAULT_MODEL,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype = "float32",
    checkpoint: str | None = None,
    *,
    placement: Placement | None = None,
) -> Backbone:
    """Load a CLIP model once per process and return the cached one afterwards.

    Each module a model's form needs is asked once, for everything it decides: where the model lives
    (``model_sources``), its family (``families``), its tokenizer (``tokenizer_check``), how its images are prepared
    (``image_constants``) and its weights (``checkpoints.files``).

    Args:
        model: Hub id (e.g. ``openai/clip-vit-base-patch32``), a local transformers folder, or a model object with
            its processor, ``(model, processor)`` (``capeval.clip.in_memory``; built anew on each call).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; ``None`` = first GPU if any, else CPU.
        dtype: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.
        checkpoint: extra weights loaded over the model (PAC-S); see ``capeval.clip.checkpoints``.
        placement: ``device`` and ``dtype`` already resolved together (``devices.resolve_placement``, as a metric's
            ``check_options(placement=(device, dtype))`` gives it): they are then neither read nor resolved again.

    Raises:
        ValueError: unknown model, device or dtype, or a folder that is not a CLIP model.
        OSError: the model is not available offline; the message says how to fix it.
    """
    if placement is None:
        placement = resolve_placement(device, dtype)
    if not isinstance(model, (str, os.PathLike)):
        from capeval.clip.in_memory import model_object_fields

        if checkpoint is not None:
            raise ValueError(
                "checkpoint= replaces a model's weights, and model= is a model object the caller holds: load the "
                "checkpoint into a Hub id or folder instead (PAC-S's weights are a whole model)"
            )
        return Backbone(**model_object_fields(model, placement))  # never cached: its weights change
    model = os.fspath(model)
    source = find_model(model)
    if source.form in ("longclip", "open_clip"):
        return _load_weights_file(model, source.form, placement, checkpoint)
    # A local folder is named by its own name and (in the revision) its contents, never its path: two clones
    # scoring with the same weights sign alike. The cache key keeps the path.
    local = source.hub_id is None
    model_id = source.folder.name if local else model
    key = (
        str(source.folder) if local else model,
        source.revision,
        str(placement.device),
        placement.dtype,
        checkpoint,
    )
    return _cached(key, lambda: _load_uncached(model, model_id, source, placement, checkpoint))


def _cached(key: tuple, build: Callable[[], Backbone]) -> Backbone:
    """The backbone cached under ``key``, built by ``build`` the first time. The lock is held while building, so
    two threads asking for one model load it once."""
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = build()
        return _CACHE[key]


def _load_weights_file(model: str, form: str, placement: Placement, checkpoint: str | None) -> Backbone:
    """An OpenCLIP or Long-CLIP file, asked once of its form module (``open_clip_files``, ``longclip_files``): it
    resolves the file, names its revision and asks the cache below with everything that decides its numbers, building
    the backbone's fields on a miss; the model is placed here, as every model this module loads."""
    what = f"model {model!r}"

    def cached(key: tuple, build: Callable[[], dict]) -> Backbone:
        key = (*key, str(placement.device), placement.dtype)
        return _cached(key, lambda: _placed(build(), placement, what))

    if form == "longclip":
        from capeval.clip.longclip_files import longclip_backbone

        if checkpoint is not None:
            raise ValueError(
                f"model {model!r} is a whole Long-CLIP model: checkpoint= (PAC-S weights) would replace all of it"
            )
        return longclip_backbone(model, cached)
    from capeval.clip.open_clip_files import open_clip_backbone

    return open_clip_backbone(model, checkpoint, cached)


def _placed(fields: dict, placement: Placement, what: str) -> Backbone:
    """The backbone of a weights file's fields (``open_clip_fields``, ``longclip_fields``), its model placed."""
    _place_for_scoring(fields["model"], placement, what)
    return Backbone(**fields, device=placement.device, dtype=placement.dtype)


def _place_for_scoring(model: torch.nn.Module, placement: Placement, what: str) -> torch.nn.Module:
    """A loaded model frozen in eval mode on ``placement``'s device in its dtype (in place), refused if the cast made
    a weight infinite.

    Raises:
        ValueError: a weight beyond the dtype's range (float16 tops out at 65504), naming ``what`` and the tensor.
    """
    model.eval().requires_grad_(False)
    model.to(device=placement.device, dtype=placement.dtype)
    if placement.dtype != torch.float32:
        check_finite(model.state_dict().items(), what, cast_to=placement.dtype)
    return model


def _load_uncached(
    model: str, model_id: str, source: ModelSource, placement: Placement, checkpoint: str | None
) -> Backbone:
    from transformers import AutoConfig, AutoTokenizer

    folder, hub = source.folder, source.hub_id is not None
    read_from = model if hub else str(folder)
    try:
        config = AutoConfig.from_pretrained(read_from, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"model {model!r} is not a CLIP model: {err}") from err
    family, model_class = family_and_class(config, f"model {model!r}")
    if checkpoint is not None and not family.is_clip:
        raise ValueError(
            f"checkpoint {checkpoint!r}: PAC-S checkpoints fit CLIPModel backbones only, and model {model!r} is a "
            f"{family.model_class}"
        )

    def read_tokenizer():
        return _read(
            lambda: AutoTokenizer.from_pretrained(read_from, trust_remote_code=False), model, folder, hub
        )

    def read_weights():
        # Explicit, so no transformers default can change it: pickled weights are read tensors-only, and no code
        # shipped with a model runs.
        return _read(
            lambda: model_class.from_pretrained(
                read_from, config=config, weights_only=True, trust_remote_code=False
            ),
            model,
            folder,
            hub,
        )

    # The tokenizer (a folder without its files is refused before transformers reads half of one) and how images are
    # prepared are decided before the weights are read: a model refused for either costs nothing more.
    where = f"model {model!r}" if hub else f"model folder {folder}"
    text = checked_tokenizer(read_tokenizer, family, config, where, folder, hub)
    size, constants = folder_image_recipe(folder, config, family, source.hub_id)
    where = f"model {model!r} ({folder})" if hub else f"model folder {folder}"
    clip = read_model_weights(folder, read_weights, where, _PICKLED_WEIGHTS_HINT)
    weights_tag = None
    if checkpoint is not None:
        from capeval.clip.checkpoints.load import load_checkpoint_into

        weights_tag = load_checkpoint_into(clip, checkpoint)
    _place_for_scoring(
        clip, placement, where if checkpoint is None else f"{where} with checkpoint {checkpoint!r}"
    )
    return Backbone(
        model=clip,
        tokenizer=text.tokenizer,
        model_id=model_id,
        revision=source.revision,
        device=placement.device,
        dtype=placement.dtype,
        image_size=size,
        image_mean=constants.mean,
        image_std=constants.std,
        context_length=text.context_length,
        weights=weights_tag,
        origin=constants.origin,
        family=family,
        lowercase=text.lowercase,
    )


def _read(read: Callable, model: str, folder: Path, hub: bool):
    """``read()``: transformers reading a model folder or Hub snapshot (its weights, its tokenizer), without its
    progress bars, a failure turned into what to do about it.

    Raises:
        HubModelUnavailableError: a Hub model's files neither cached nor downloadable now.
        ValueError: pickled weights refused (the globals they need named), or a damaged weights file (named).
    """
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a per-tensor "Loading weights" bar is noise for a metric
    try:
        return read()
    except pickle.UnpicklingError as err:
        raise _weights_refusal(folder, err) from err
    except OSError as err:
        if hub and not Path(model).exists():
            raise HubModelUnavailableError(model) from err
        raise
    except Exception as err:  # noqa: BLE001 - only a damaged weights file is turned into a ValueError
        refusal = _damaged_weights(folder, err)
        if refusal is None:
            raise
        raise refusal from err
    finally:
        if bars:
            hf_logging.enable_progress_bar()


_PICKLED_WEIGHTS_HINT = (
    "Use the model's safetensors weights (model.safetensors), or re-save them from a trusted copy."
)


def _weights_refusal(folder: Path, err: pickle.UnpicklingError) -> ValueError:
    """The refused pickled weights file of a model folder, with the globals it would have needed."""
    from capeval.clip.checkpoints.files import unpickling_refusal

    for path in sorted(folder.glob("*.bin")):
        refusal = unpickling_refusal(path, err, _PICKLED_WEIGHTS_HINT)
        if "truncated or corrupt" not in str(refusal):  # globals named: a refusal of this file, not damage
            return refusal
    names = ", ".join(p.name for p in sorted(folder.glob("*.bin"))) or "its weights"
    first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ValueError(
        f"model folder {folder}: {names} could not be read with weights_only=True: truncated, corrupt or not "
        f"a PyTorch weights file ({first_line})"
    )


def _damaged_weights(folder: Path, err: Exception) -> ValueError | None:
    """A ValueError naming the damaged weights file of a model folder, when ``err`` comes from reading one;
    ``None`` for any other error (which is raised as it is).

    safetensors raises its own ``SafetensorError`` and torch a ``RuntimeError`` for a cut zip archive: neither
    names the file, and a folder can hold several.
    """
    from safetensors import SafetensorError, safe_open

    if isinstance(err, SafetensorError):
        for path in sorted(folder.glob("*.safetensors")):
            try:
                with safe_open(str(path), framework="pt"):
                    pass
            except (SafetensorError, OSError) as probe:
                return ValueError(
                    f"{path} is truncated or corrupt: not a readable safetensors file ({probe})"
                )
        return ValueError(f"model folder {folder}: its safetensors weights could not be read ({err})")
    if isinstance(err, RuntimeError) and "PytorchStreamReader" in str(err):
        names = ", ".join(p.name for p in sorted(folder.glob("*.bin"))) or "its weights"
        return ValueError(f"model folder {folder}: {names} is truncated or corrupt ({err})")
    return None


def clear_cache(tokenizers: bool = True) -> None:
    """Forget every loaded backbone (tests, or to free memory), and the tokenizers read for them unless
    ``tokenizers`` is False (a tokenizer is only read, so tests that must share no backbone may share it)."""
    with _CACHE_LOCK:
        _CACHE.clear()
    if tokenizers:
        forget_read_tokenizers()
