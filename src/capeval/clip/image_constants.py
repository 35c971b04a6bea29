"""Image normalisation constants (per-channel mean and std) of a CLIP model, decided by where its weights come from.

A model's mean/std are a property of its training, not of the file that happens to sit beside the weights: the
Hub's transformers conversions of OpenCLIP models carry a ``preprocessor_config.json`` that need not say what
open_clip itself uses. So:

1. A table keyed by checkpoint origin decides where the origin is known. The origins are open_clip's
   ``(architecture, pretrained tag)`` pairs with the constants its own pretrained table gives them
   (mlfoundations/open_clip ``src/open_clip/pretrained.py``: ``_pcfg`` defaults to ``OPENAI_DATASET_MEAN/STD``,
   ``_VITL14["laion2b_s32b_b82k"]`` overrides them with ``INCEPTION_MEAN/STD``), reached from the Hub ids of
   their transformers weights (OpenAI's ``openai/clip-vit-*``, LAION's ``laion/CLIP-ViT-*``) or from the
   ``open_clip:ARCH/TAG`` spelling. A converted or trained folder names its origin in ``pacscore.json``.
   Where the folder's own ``preprocessor_config.json`` disagrees, the table wins, with a warning naming both.
2. Otherwise the model's ``preprocessor_config.json`` decides (the tiny test CLIPs, models unknown here), or,
   for a folder saved by transformers 5's processors, the ``image_processor`` entry of its
   ``processor_config.json`` (``image_settings_file`` finds either, for every path).
3. Neither: a ``ValueError`` naming the folder and what to add. No constants are ever assumed.

Families other than CLIP, and model objects given with their image processor, take geometry and normalisation from
that processor (``capeval.clip.image_processors``). Each way a model is named asks this module once for how its
images are prepared: ``folder_image_recipe`` (folders and Hub snapshots), ``model_object_recipe`` (model objects).
Every mean/std stated anywhere (these files, an in-memory image processor, an OpenCLIP sidecar) passes
``check_channels``.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from capeval.clip.checkpoints.locate import PROVENANCE_FILE
from capeval.clip.image_geometry import ProcessorGeometry
from capeval.diagnostics.categories import ImageConstantsWarning, user_stacklevel

OPENAI_IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)  # Radford et al. 2021, clip/clip.py _transform
OPENAI_IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)
INCEPTION_IMAGE_MEAN = (0.5, 0.5, 0.5)  # open_clip src/open_clip/constants.py INCEPTION_MEAN
INCEPTION_IMAGE_STD = (0.5, 0.5, 0.5)  # open_clip src/open_clip/constants.py INCEPTION_STD
PREPROCESSOR_FILE = "preprocessor_config.json"
PROCESSOR_FILE = "processor_config.json"  # transformers 5 processors save the image processor's settings here
# Keys of a provenance file that name the model a folder's weights were made from, most specific first:
# "origin" (written by capeval since this table), "base_model" (conversions), "trained_from" (PAC-S training).
_PROVENANCE_ORIGIN_KEYS = ("origin", "base_model", "trained_from")
# Pixels lie in [0, 1]. A mean far outside, or a std far above 1, maps every image to nearly one flat picture; a
# std far below maps pixels to values in the hundreds of thousands (inf in float16).
MEAN_LIMIT = 10.0
STD_LIMITS = (1e-3, 10.0)
_TOLERANCE = (
    1e-6  # constants written to JSON and read back are the same floats; anything else is a real difference
)

_OPENAI = (OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD)
_INCEPTION = (INCEPTION_IMAGE_MEAN, INCEPTION_IMAGE_STD)

# open_clip's pretrained table (src/open_clip/pretrained.py, commit 89fb801 of mlfoundations/open_clip) for the
# CLIP ViTs that have transformers weights on the Hub: (architecture, pretrained tag) -> (mean, std).
OPEN_CLIP_PRETRAINED: dict[tuple[str, str], tuple[tuple, tuple]] = {
    ("ViT-B-32", "openai"): _OPENAI,
    ("ViT-B-32", "laion2b_s34b_b79k"): _OPENAI,  # _VITB32, _pcfg default
    ("ViT-B-32", "datacomp_xl_s13b_b90k"): _OPENAI,
    ("ViT-B-16", "openai"): _OPENAI,
    ("ViT-B-16", "laion2b_s34b_b88k"): _OPENAI,  # _VITB16, _pcfg default
    ("ViT-B-16", "datacomp_xl_s13b_b90k"): _OPENAI,
    ("ViT-L-14", "openai"): _OPENAI,
    ("ViT-L-14", "laion2b_s32b_b82k"): _INCEPTION,  # _VITL14: mean=INCEPTION_MEAN, std=INCEPTION_STD
    ("ViT-L-14", "datacomp_xl_s13b_b90k"): _OPENAI,
    ("ViT-L-14-336", "openai"): _OPENAI,
    ("ViT-H-14", "laion2b_s32b_b79k"): _OPENAI,  # _VITH14, _pcfg default
    ("ViT-g-14", "laion2b_s12b_b42k"): _OPENAI,  # _VITg14, _pcfg default
    ("ViT-g-14", "laion2b_s34b_b88k"): _OPENAI,
    ("ViT-bigG-14", "laion2b_s39b_b160k"): _OPENAI,  # _VITbigG14, _pcfg default
}
# Hub repos of transformers CLIPModel weights -> their open_clip origin (OpenAI's own conversions, and the
# ``hf_hub`` entries of open_clip's table for LAION's).
HUB_ORIGINS: dict[str, tuple[str, str]] = {
    "openai/clip-vit-base-patch32": ("ViT-B-32", "openai"),
    "openai/clip-vit-base-patch16": ("ViT-B-16", "openai"),
    "openai/clip-vit-large-patch14": ("ViT-L-14", "openai"),
    "openai/clip-vit-large-patch14-336": ("ViT-L-14-336", "openai"),
    "laion/CLIP-ViT-B-32-laion2B-s34B-b79K": ("ViT-B-32", "laion2b_s34b_b79k"),
    "laion/CLIP-ViT-B-32-DataComp.XL-s13B-b90K": ("ViT-B-32", "datacomp_xl_s13b_b90k"),
    "laion/CLIP-ViT-B-16-laion2B-s34B-b88K": ("ViT-B-16", "laion2b_s34b_b88k"),
    "laion/CLIP-ViT-B-16-DataComp.XL-s13B-b90K": ("ViT-B-16", "datacomp_xl_s13b_b90k"),
    "laion/CLIP-ViT-L-14-laion2B-s32B-b82K": ("ViT-L-14", "laion2b_s32b_b82k"),
    "laion/CLIP-ViT-L-14-DataComp.XL-s13B-b90K": ("ViT-L-14", "datacomp_xl_s13b_b90k"),
    "laion/CLIP-ViT-H-14-laion2B-s32B-b79K": ("ViT-H-14", "laion2b_s32b_b79k"),
    "laion/CLIP-ViT-g-14-laion2B-s12B-b42K": ("ViT-g-14", "laion2b_s12b_b42k"),
    "laion/CLIP-ViT-g-14-laion2B-s34B-b88K": ("ViT-g-14", "laion2b_s34b_b88k"),
    "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k": ("ViT-bigG-14", "laion2b_s39b_b160k"),
}
_HUB_BY_LOWER = {k.lower(): k for k in HUB_ORIGINS}  # Hub ids are case-insensitive


@dataclass(frozen=True)
class ImageConstants:
    """The per-channel normalisation of a model's pixels and what decided it.

    Attributes:
        mean: (3,) per-channel mean of [0, 1] pixels.
        std: (3,) per-channel std.
        origin: the known origin that decided them (``laion/CLIP-ViT-L-14-laion2B-s32B-b82K``), or ``None``
            when the model's ``preprocessor_config.json`` did.
    """

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    origin: str | None = None

    @property
    def is_openai(self) -> bool:
        """Whether these are OpenAI CLIP's constants (then signatures do not name them)."""
        return _same(self.mean, OPENAI_IMAGE_MEAN) and _same(self.std, OPENAI_IMAGE_STD)

    def signature_fields(self) -> dict[str, str]:
        """``{"image_mean": "0.5,0.5,0.5", "image_std": ...}`` when they differ from OpenAI's, else ``{}``: the
        signatures (and caches) of models normalised like OpenAI's CLIP stay what they were."""
        if self.is_openai:
            return {}
        return {"image_mean": _format(self.mean), "image_std": _format(self.std)}


def open_clip_origin(architecture: str, pretrained: str) -> str:
    """The origin string of an open_clip ``(architecture, pretrained tag)``: ``open_clip:ViT-L-14/laion2b_s32b_b82k``."""
    return f"open_clip:{architecture}/{pretrained}"


def known_origin(origin: str) -> tuple[str, tuple, tuple] | None:
    """``(canonical origin, mean, std)`` for an origin in the table, else ``None``.

    Args:
        origin: a Hub id (any case, with or without ``@revision``), or ``open_clip:ARCH/TAG``.
    """
    name = origin.split("@", 1)[0].strip()
    if name.startswith("open_clip:"):
        arch, _, tag = name[len("open_clip:") :].partition("/")
        if (arch, tag) in OPEN_CLIP_PRETRAINED:
            return open_clip_origin(arch, tag), *OPEN_CLIP_PRETRAINED[(arch, tag)]
        return None
    hub = _HUB_BY_LOWER.get(name.lower())
    if hub is None:
        return None
    return hub, *OPEN_CLIP_PRETRAINED[HUB_ORIGINS[hub]]


def folder_origins(folder: Path) -> list[str]:
    """Origins a model folder names: its provenance file's, then the Hub repo of a Hub-cache snapshot folder."""
    found = []
    provenance = folder / PROVENANCE_FILE
    if provenance.is_file():
        try:
            record = json.loads(provenance.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{provenance} is not readable JSON ({err})") from err
        if isinstance(record, dict):
            found += [str(record[k]) for k in _PROVENANCE_ORIGIN_KEYS if isinstance(record.get(k), str)]
    # huggingface_hub's cache: .../models--org--name/snapshots/<commit>/
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        found.append(folder.parent.parent.name[len("models--") :].replace("--", "/"))
    return found


def image_settings_file(folder: Path, hub_id: str | None = None) -> Path | None:
    """The file holding a model's image-processor settings: its ``preprocessor_config.json``, else the
    ``processor_config.json`` with an ``image_processor`` entry that transformers 5 processors save instead (a
    ``CLIPProcessor.save_pretrained`` folder has no other); ``None`` when it has neither.

    The one place every path finds them: model folders, Hub snapshots, converted PAC-S folders.

    Args:
        folder: the model's folder (a Hub snapshot for Hub models).
        hub_id: the Hub repo of a snapshot: a file the snapshot lacks is fetched from it at the snapshot's commit
            (from the local cache only when offline).
    """
    for name in (PREPROCESSOR_FILE, PROCESSOR_FILE):
        path = folder / name
        if not path.is_file() and hub_id is not None:
            path = _hub_file(hub_id, name, folder.name) or path
        if path.is_file() and (name == PREPROCESSOR_FILE or _has_image_processor(path)):
            return path
    return None


def _hub_file(hub_id: str, name: str, commit: str) -> Path | None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(hub_id, name, revision=commit))
    except EntryNotFoundError:  # the repo has none (LocalEntryNotFoundError, offline, is one too)
        return None


def _has_image_processor(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text()).get("image_processor"), dict)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def read_image_settings(path: Path) -> dict:
    """The image processor's settings in ``path``: a ``preprocessor_config.json`` whole, or the
    ``image_processor`` entry of a ``processor_config.json``.

    Raises:
        ValueError: unreadable JSON, or not a JSON object (named).
    """
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not readable JSON ({err})") from err
    if isinstance(cfg, dict) and path.name == PROCESSOR_FILE:
        cfg = cfg.get("image_processor")
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} holds {type(cfg).__name__}, not a JSON object of image-processor settings")
    return cfg


def read_preprocessor_constants(path: Path) -> tuple[tuple, tuple]:
    """(mean, std) from a ``preprocessor_config.json`` or ``processor_config.json`` (``read_image_settings``), as
    transformers' ``CLIPImageProcessor`` applies them.

    ``do_normalize: false`` means pixels in [0, 1] (mean 0, std 1); a single number stands for all channels.

    Raises:
        ValueError: unreadable JSON, missing ``image_mean``/``image_std`` (named), or values that fail
            ``check_channels``.
    """
    cfg = read_image_settings(path)
    if cfg.get("do_normalize", True) is False:
        return (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    missing = [k for k in ("image_mean", "image_std") if k not in cfg]
    if missing:
        raise ValueError(
            f"{path} has no {' or '.join(missing)}: the model's normalisation is not stated there"
        )
    return check_mean_std(str(path), ("image_mean", cfg["image_mean"]), ("image_std", cfg["image_std"]))


def folder_image_recipe(
    folder: Path, config, family, hub_id: str | None = None
) -> tuple[int | ProcessorGeometry, ImageConstants]:
    """How the images of a model folder (or Hub snapshot) are prepared: CLIP's input size from its vision config
    with mean/std by origin or from its image settings file (``decide_image_constants``, never assumed); other
    families' geometry and constants from their image processor (``image_processors.settings_recipe``). The file is
    ``preprocessor_config.json`` or transformers 5's ``processor_config.json`` (``image_settings_file``).

    Args:
        folder: the model's folder (a Hub snapshot for Hub models).
        config: its transformers config.
        family: its ``capeval.clip.families.Family``.
        hub_id: the Hub repo of a snapshot (a known origin; a missing settings file is fetched from it).

    Returns:
        ``(input size, constants)``: an int for CLIP, a ``ProcessorGeometry`` for other families.

    Raises:
        ValueError: no settings file and no known origin, or an image processor capeval does not reproduce (named).
    """
    settings = image_settings_file(folder, hub_id)
    where = f"model {hub_id!r}" if hub_id is not None else f"model folder {folder}"
    if not family.is_clip:
        if settings is None:
            raise ValueError(
                f"{where} has neither {PREPROCESSOR_FILE} nor a {PROCESSOR_FILE} with an image_processor entry "
                f"(looked in {folder}): its image processor (resize, crop, mean/std) is unknown, so its images cannot "
                "be prepared as it was trained. Add the file of the checkpoint it comes from"
            )
        from capeval.clip.image_processors import settings_recipe

        geometry, normalisation = settings_recipe(where, settings)
        return geometry, _processor_constants(where, normalisation)
    size = int(config.vision_config.image_size)
    origins = ([hub_id] if hub_id is not None else []) + folder_origins(folder)
    return size, decide_image_constants(where, folder, settings, origins)


def model_object_recipe(
    where: str, family, image_processor, config
) -> tuple[int | ProcessorGeometry, ImageConstants]:
    """How a model object's images are prepared (``capeval.clip.in_memory``): from its image processor, or, for a
    CLIPModel of known origin given without one, from the origin table; a CLIPModel's processor must resize and
    crop as CLIP does, and a known origin's constants win over the processor's (with a warning).

    Args:
        where: the model object as messages name it.
        family: its ``capeval.clip.families.Family``.
        image_processor: its transformers image processor, or ``None``.
        config: its transformers config (``_name_or_path`` names its origin).

    Raises:
        ValueError: no image processor and no known origin, or a processor capeval does not reproduce (named).
    """
    origin = known_origin(str(getattr(config, "_name_or_path", "") or ""))
    if image_processor is None:
        if family.is_clip and origin is not None:
            name, mean, std = origin
            return int(config.vision_config.image_size), ImageConstants(tuple(mean), tuple(std), name)
        raise ValueError(
            f"{where} was given without an image processor, so how its images were prepared (size, crop, mean/std) "
            "is unknown: pass model=(model, processor) or model=(model, tokenizer, image_processor)"
        )
    from capeval.clip.image_processors import processor_recipe

    geometry, normalisation = processor_recipe(where, image_processor)
    constants = _processor_constants(where, normalisation)
    if not family.is_clip:
        return geometry, constants
    size = int(config.vision_config.image_size)
    clip_like = (
        geometry.resize == ("shortest_edge", size)
        and geometry.crop == (size, size)
        and geometry.resample == 3
    )
    if not clip_like:
        raise ValueError(
            f"{where}: its image processor resizes {geometry.describe()}, not as CLIP does (bicubic shorter side to "
            f"{size}, centre crop {size}x{size}), which is what capeval reproduces for CLIPModel"
        )
    if origin is not None:
        return size, decide_constants_by_origin(where, origin, constants)
    return size, constants


def _processor_constants(where: str, normalisation: tuple[list[float], list[float]]) -> ImageConstants:
    """An image processor's normalisation on [0, 1] pixels (``image_processors``), checked as every other is."""
    mean, std = normalisation
    return ImageConstants(
        *check_mean_std(
            f"{where}: its image processor",
            ("image_mean (as applied to [0, 1] pixels)", mean),
            ("image_std (as applied to [0, 1] pixels)", std),
        ),
        None,
    )


def decide_image_constants(
    where: str, folder: Path, preprocessor: Path | None, origins: list[str]
) -> ImageConstants:
    """The normalisation of a model: the origin table where an origin is known, else its preprocessor config.

    Args:
        where: how to name the model in messages (``model folder /x``, ``model 'org/name'``).
        folder: the model's folder (named in the error).
        preprocessor: its image settings file (``image_settings_file``; ``None`` or a missing path: there is none).
        origins: candidate origins, most specific first (a Hub id, a provenance record's ``base_model``).

    Raises:
        ValueError: no known origin and no readable constants; the message names the folder and what to add.
    """
    known = next((k for k in map(known_origin, origins) if k is not None), None)
    present = preprocessor is not None and preprocessor.is_file()
    if known is not None:
        origin, mean, std = known
        if present:
            try:
                theirs = read_preprocessor_constants(preprocessor)
            except ValueError as err:
                theirs = None
                warnings.warn(
                    ImageConstantsWarning(
                        f"{where}: {err}; using {origin}'s constants from open_clip's table"
                    ),
                    stacklevel=user_stacklevel(),
                )
            if theirs is not None and not (_same(theirs[0], mean) and _same(theirs[1], std)):
                warnings.warn(
                    ImageConstantsWarning(
                        f"{where}: {preprocessor} says image_mean={_format(theirs[0])}, image_std={_format(theirs[1])}, "
                        f"but {origin} was trained with image_mean={_format(mean)}, image_std={_format(std)} "
                        "(open_clip's pretrained table); using the latter"
                    ),
                    stacklevel=user_stacklevel(),
                )
        return ImageConstants(tuple(mean), tuple(std), origin)
    if present:
        mean, std = read_preprocessor_constants(preprocessor)
        return ImageConstants(mean, std, None)
    named = f" (it names {', '.join(repr(o) for o in origins)}, not one capeval knows)" if origins else ""
    raise ValueError(
        f"{where}: no {PREPROCESSOR_FILE} in {folder} (nor a {PROCESSOR_FILE} with an image_processor entry) and no "
        f"known origin{named}, so the image mean/std it was "
        f"trained with are unknown. Add a {PREPROCESSOR_FILE} with the model's image_mean and image_std "
        "(capeval.clip.backbones.write_preprocessor_config writes one), or, for weights made from a known model, "
        f'a {PROVENANCE_FILE} naming it as "origin" (one of: {", ".join(HUB_ORIGINS)}, or open_clip:ARCH/TAG)'
    )


def decide_constants_by_origin(
    where: str, origin: tuple[str, tuple, tuple], theirs: ImageConstants
) -> ImageConstants:
    """The origin table's constants for a model of known origin, with a warning when its own processor (an
    in-memory image processor, ``theirs``) says otherwise, as for folders in ``decide_image_constants``."""
    name, mean, std = origin
    if not (_same(theirs.mean, mean) and _same(theirs.std, std)):
        warnings.warn(
            ImageConstantsWarning(
                f"{where}: its image processor says image_mean={_format(theirs.mean)}, "
                f"image_std={_format(theirs.std)}, but {name} was trained with image_mean={_format(mean)}, "
                f"image_std={_format(std)} (open_clip's pretrained table); using the latter"
            ),
            stacklevel=user_stacklevel(),
        )
    return ImageConstants(tuple(mean), tuple(std), name)


def check_channels(where: str, key: str, value, std: bool = False) -> tuple[float, float, float]:
    """One per-channel normalisation value checked, for every file or processor that states one.

    Args:
        where: the file or processor named in the message (``/m/preprocessor_config.json``).
        key: the field named in the message (``image_std``, ``preprocess_cfg.mean``).
        value: three numbers, or one number standing for all three channels.
        std: a std (bounded in ``STD_LIMITS``) rather than a mean (bounded by ``MEAN_LIMIT``).

    Returns:
        (3,) the values as floats.

    Raises:
        ValueError: not three finite numbers within the bounds, naming ``where``, ``key`` and the value.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 3
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    )
    low, high = STD_LIMITS if std else (-MEAN_LIMIT, MEAN_LIMIT)
    if not ok or not all(low <= v <= high for v in value):
        raise ValueError(f"{where}: {key} must be three finite numbers in [{low:g}, {high:g}], got {value!r}")
    return tuple(float(v) for v in value)


def check_mean_std(where: str, mean: tuple[str, object], std: tuple[str, object]) -> tuple[tuple, tuple]:
    """``check_channels`` of a ``(key, value)`` mean and a ``(key, value)`` std stated together, the mean first.

    Returns:
        ``(mean, std)``: each (3,) floats.

    Raises:
        ValueError: as ``check_channels``.
    """
    return check_channels(where, *mean), check_channels(where, *std, std=True)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(abs(float(x) - float(y)) <= _TOLERANCE for x, y in zip(a, b, strict=True))


def _format(values) -> str:
    return ",".join(repr(float(v)) for v in values)
