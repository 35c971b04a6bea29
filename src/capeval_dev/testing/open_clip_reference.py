"""open_clip's own tokenizer, loaded by file path, and its evaluation transform restated as PIL calls: test references
for OpenCLIP weights files.

The PyPI package ``open_clip_torch`` (3.3.0, a test-only dependency: ``pip install --no-deps open_clip_torch==3.3.0``)
imports torchvision in its package ``__init__``, which cannot be installed beside the CPU torch used here. Its
``tokenizer.py`` imports only ftfy, numpy, regex and torch, so it is loaded from the installed file without running
the package, and its ``SimpleTokenizer`` runs on the BPE vocabulary bundled beside it.

The transform cannot be loaded (it is torchvision's), so ``open_clip_pixels`` restates, for a PIL image, the PIL
calls its steps make, in the order open_clip 3.3.0 composes them (``src/open_clip/transform.py``,
``image_transform`` with ``is_train=False``, reached through ``image_transform_v2``):

- ``resize_mode="shortest"`` (square size): ``Resize(size)``, ``CenterCrop(size)``, then ``MaybeConvertMode()``
  (``convert("RGB")`` for a PIL image);
- ``resize_mode="squash"``: ``Resize((size, size))``, then the same conversion; no crop.

torchvision's ``Resize`` on a PIL image (``torchvision/transforms/functional.py``, ``resize``) computes the output
size (shorter side to ``size``, the longer truncated by ``int``; or the given height and width), returns the image
untouched when that is its size, and otherwise calls ``torchvision/transforms/_functional_pil.py`` ``resize``, which
is ``img.resize((width, height), interpolation)`` with PIL's bicubic filter for ``InterpolationMode.BICUBIC`` (PIL
itself anti-aliases). ``CenterCrop`` on a PIL image is ``img.crop`` at offsets ``int(round((side - size) / 2.0))``
(``functional.center_crop``, ``_functional_pil.crop``). Read in torchvision 0.15 and later, where the PIL helpers
live in ``_functional_pil.py`` (``functional_pil.py`` before).
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

from capeval_dev.testing.openai_reference import torchvision_resize_center_crop

OPEN_CLIP_VERSION = "3.3.0"
_INSTALL = f"pip install --no-deps open_clip_torch=={OPEN_CLIP_VERSION}"


def open_clip_dir() -> Path:
    """Folder of the installed ``open_clip`` package, found without importing it (its ``__init__`` needs torchvision).

    Raises:
        ModuleNotFoundError: open_clip_torch is not installed (the command to install it named).
    """
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"open_clip's reference tokenizer is missing: {_INSTALL}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / "tokenizer.py").is_file() or not (folder / "bpe_simple_vocab_16e6.txt.gz").is_file():
        raise ModuleNotFoundError(f"{folder} is not the open_clip_torch package: {_INSTALL}")
    return folder


def open_clip_version() -> str:
    """The installed open_clip's version, read from its ``version.py`` without importing the package."""
    text = (open_clip_dir() / "version.py").read_text()
    return text.split("=", 1)[1].strip().strip("'\"")


@lru_cache(maxsize=1)
def tokenizer_module() -> ModuleType:
    """open_clip's ``tokenizer.py``, executed on its own."""
    path = open_clip_dir() / "tokenizer.py"
    spec = importlib.util.spec_from_file_location("_open_clip_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def simple_tokenizer():
    """open_clip's default ``SimpleTokenizer`` (``clean="lower"``, 77 positions), as ``get_tokenizer`` builds it for
    the ViT CLIPs capeval loads (none of their configs sets ``tokenizer_kwargs`` or ``hf_tokenizer_name``)."""
    return tokenizer_module().SimpleTokenizer()


def open_clip_tokenize(texts: list[str], context_length: int = 77) -> list[list[int]]:
    """Token ids as open_clip's tokenizer call builds them, without the zero padding: start-of-text, ``encode``,
    end-of-text, cut to ``context_length`` with the last id set to end-of-text."""
    tok = simple_tokenizer()
    padded = tok(texts, context_length=context_length)
    return [row[: int((row != 0).nonzero().max()) + 1].tolist() for row in padded]


def open_clip_pixels(img: Image.Image, size: int, resize_mode: str) -> np.ndarray:
    """(size, size, 3) uint8: open_clip's evaluation transform up to ``ToTensor`` (see the module docstring).

    Raises:
        ValueError: a resize mode other than "shortest" and "squash".
    """
    if resize_mode == "squash":
        if img.size != (size, size):
            img = img.resize((size, size), Image.BICUBIC)
    elif resize_mode == "shortest":
        img = torchvision_resize_center_crop(img, size)
    else:
        raise ValueError(f"resize_mode {resize_mode!r}: only 'shortest' and 'squash' are restated here")
    return np.asarray(img.convert("RGB"), dtype=np.uint8)
