"""Two captions, two images and each metric's callable on the tiny CLIP, for the tests of the callables' input
checks and of one scorer shared by several threads."""

from __future__ import annotations

import numpy as np
from PIL import Image

import capeval

PREDICTIONS = ["a dark image", "a bright image"]


def two_images():
    """A dark and a bright 24x24 image, one per prediction."""
    return [Image.fromarray(np.full((24, 24, 3), c, dtype=np.uint8)) for c in (20, 230)]


def every_scorer(tiny_clip_dir):
    """Each callable, with a call that scores ``predictions`` (and ``references`` where it takes them)."""
    model = str(tiny_clip_dir)
    images = two_images()
    clip = capeval.CLIPScore(model=model, device="cpu")
    ref = capeval.RefCLIPScore(model=model, device="cpu")
    pac = capeval.PACScore(checkpoint=model, device="cpu")
    em = capeval.EMScore(model=model, device="cpu")
    wmd, wembsim = capeval.WMD(), capeval.WEmbSim()
    return {
        "clipscore": lambda p, r: clip(p, images=images),
        "refclipscore": lambda p, r: ref(p, references=r, images=images),
        "pacscore": lambda p, r: pac(p, references=r, images=images),
        "emscore": lambda p, r: em(p, references=r),
        "wmd": lambda p, r: wmd(p, r),
        "wembsim": lambda p, r: wembsim(p, r),
    }
