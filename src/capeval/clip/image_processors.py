"""A transformers image processor read into what capeval's uint8 image path reproduces: its geometry and the
normalisation it applies, as pixels in [0, 1] meet it.

Families other than CLIP (and model objects given with their processor) are scored as their own image processor
prepares images. transformers itself reads the processor's settings file (``preprocessor_config.json``, or the
``image_processor`` entry of transformers 5's ``processor_config.json``), so a key the file omits takes the processor
class's default. The processor computes ``((u * s - offset) - mean) / std`` (then ``/ std`` again with EfficientNet's
``include_top``) on uint8 values ``u``; with ``p = u / 255`` that is ``(p - mean') / std'`` where
``mean' = (mean + offset) / (255 s)`` and ``std' = std * top / (255 s)``: the normalisation returned. It is returned
unchecked: ``capeval.clip.image_constants``, which calls this module, checks it as it checks every mean/std stated
anywhere (``check_channels``).
"""

from __future__ import annotations

from pathlib import Path

from capeval.clip.image_geometry import ProcessorGeometry

# Image processors whose steps the uint8 path reproduces (resize, centre crop, rescale, normalise; EfficientNet's
# rescale offset and include_top division too); the PIL backend's name carries a "Pil" suffix.
IMAGE_PROCESSORS = {
    "CLIPImageProcessor",
    "SiglipImageProcessor",
    "ChineseCLIPImageProcessor",
    "EfficientNetImageProcessor",
}

Normalisation = tuple[list[float], list[float]]  # (mean', std'): per channel, as applied to pixels in [0, 1]


def settings_recipe(where: str, settings: Path) -> tuple[ProcessorGeometry, Normalisation]:
    """``processor_recipe`` of the image processor transformers builds from a model's image settings file.

    Raises:
        ValueError: a file transformers cannot read as an image processor (named), or see ``processor_recipe``.
    """
    from transformers import AutoImageProcessor

    try:
        proc = AutoImageProcessor.from_pretrained(str(settings.parent), trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{where}: {settings} could not be read as an image processor ({err})") from err
    return processor_recipe(where, proc)


def processor_recipe(where: str, proc) -> tuple[ProcessorGeometry, Normalisation]:
    """The geometry and the (unchecked) normalisation of a loaded image processor.

    Raises:
        ValueError: a processor whose steps capeval does not reproduce (named), or a non-square output.
    """
    kind = type(proc).__name__.removesuffix("Pil").removesuffix("Fast")
    if kind not in IMAGE_PROCESSORS:
        raise ValueError(
            f"{where}: its image processor is {type(proc).__name__}, whose steps capeval does not reproduce "
            f"(it reproduces {', '.join(sorted(IMAGE_PROCESSORS))})"
        )
    if not getattr(proc, "do_resize", True) or getattr(proc, "do_pad", False):
        raise ValueError(
            f"{where}: its image processor sets do_resize=false or do_pad=true; capeval needs a fixed size"
        )
    return _geometry(where, proc), _normalisation(proc)


def _geometry(where: str, proc) -> ProcessorGeometry:
    size = proc.size if isinstance(proc.size, dict) else dict(proc.size)
    if size.get("height") and size.get("width"):
        resize, out = (
            ("exact", int(size["height"]), int(size["width"])),
            (int(size["height"]), int(size["width"])),
        )
    elif size.get("shortest_edge") and not size.get("longest_edge"):
        resize, out = ("shortest_edge", int(size["shortest_edge"])), None
    else:
        raise ValueError(f"{where}: image size {size} is neither height x width nor a shortest edge")
    crop = None
    if getattr(proc, "do_center_crop", False):
        crop_size = dict(proc.crop_size)
        crop = out = (int(crop_size["height"]), int(crop_size["width"]))
    if out is None or out[0] != out[1]:
        raise ValueError(
            f"{where}: its processor gives {'unbounded' if out is None else out} images, not square ones"
        )
    resample = proc.resample if proc.resample is not None else 2  # PilBackend.resize: BILINEAR when unset
    return ProcessorGeometry(out[0], resize, crop, int(resample))


def _channels(value) -> list[float]:
    return [float(value)] * 3 if isinstance(value, (int, float)) else [float(v) for v in value]


def _normalisation(proc) -> Normalisation:
    scale = float(proc.rescale_factor) * 255 if getattr(proc, "do_rescale", True) else 255.0
    offset = 1.0 if getattr(proc, "do_rescale", True) and getattr(proc, "rescale_offset", False) else 0.0
    normalize = getattr(proc, "do_normalize", True)
    mean = _channels(proc.image_mean) if normalize else [0.0] * 3
    std = _channels(proc.image_std) if normalize else [1.0] * 3
    top = _channels(proc.image_std) if getattr(proc, "include_top", False) else [1.0] * 3
    # Rescale, offset and include_top folded in: what the pixels in [0, 1] meet.
    return [(m + offset) / scale for m in mean], [s * t / scale for s, t in zip(std, top, strict=True)]
