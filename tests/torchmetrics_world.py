"""The shapes world as inputs of the six metrics, shared by tests/test_torchmetrics.py and its spawned processes.

Each metric name maps to the inputs its ``update`` takes (``images``, ``references``, ``videos``) and to the
options both the torchmetrics class and capeval's callable are built with.
"""

from __future__ import annotations

from capeval.shapes import (
    all_scenes,
    caption,
    draw,
    draw_frames,
    mismatched,
    paraphrases,
    shapes_clip_path,
)

NAMES = ("clipscore", "refclipscore", "pacscore", "wmd", "wembsim", "emscore")
INPUTS = {
    "clipscore": ("images",),
    "refclipscore": ("images", "references"),
    "pacscore": ("images", "references"),
    "wmd": ("references",),
    "wembsim": ("references",),
    "emscore": ("videos", "references"),
}
HEADLINE = {name: name for name in NAMES}


def options(name: str) -> dict:
    """The options of the test metrics: the shapes CLIP on the CPU, the packaged GloVe vectors."""
    clip = str(shapes_clip_path())
    if name == "pacscore":  # a converted folder is a whole PAC-S model: the shapes CLIP stands in for one
        return {"checkpoint": clip, "device": "cpu", "progress": False}
    if name in ("clipscore", "refclipscore", "emscore"):
        return {"model": clip, "device": "cpu", "progress": False}
    return {}


def world(n: int = 12) -> dict[str, list]:
    """``n`` scenes: captions right for even items and one attribute off for odd ones, two paraphrases each as
    references (three for every third item), a picture and a short clip (3 to 5 frames) of each scene."""
    scenes = all_scenes()[::6][:n]  # every colour, shape and position among the first twelve
    if len(scenes) != n:
        raise ValueError(f"the shapes world has {len(scenes)} scenes one in six apart, not {n}")
    attributes = ("color", "shape", "position")
    preds = [
        caption(s) if i % 2 == 0 else caption(mismatched(s, attributes[i % 3], rng=i))
        for i, s in enumerate(scenes)
    ]
    references = [paraphrases(s)[i % 4 : i % 4 + (3 if i % 3 == 0 else 2)] for i, s in enumerate(scenes)]
    return {
        "preds": preds,
        "images": [draw(s, rng=i) for i, s in enumerate(scenes)],
        "references": references,
        "videos": [draw_frames(s, n_frames=3 + i % 3, rng=i) for i, s in enumerate(scenes)],
    }


def batch(data: dict[str, list], name: str, start: int, stop: int) -> tuple[list[str], dict[str, list]]:
    """Items ``start:stop`` as ``(preds, keyword inputs of name's update)``."""
    return data["preds"][start:stop], {key: data[key][start:stop] for key in INPUTS[name]}


def torchmetric(name: str, **extra):
    from capeval import torchmetrics as tm

    cls = {
        "clipscore": tm.CLIPScore,
        "refclipscore": tm.RefCLIPScore,
        "pacscore": tm.PACScore,
        "wmd": tm.WMD,
        "wembsim": tm.WEmbSim,
        "emscore": tm.EMScore,
    }[name]
    return cls(**options(name), **extra)


def callable_result(name: str, data: dict[str, list], start: int = 0, stop: int | None = None) -> dict:
    """capeval's own callable on items ``start:stop``: the reference the metrics are checked against."""
    from capeval.registry import build_scorer

    preds, inputs = batch(data, name, start, len(data["preds"]) if stop is None else stop)
    return build_scorer(name, **options(name))(preds, **inputs)


def ddp_worker(rank: int, world_size: int, init_file: str, out_dir: str, split: int) -> None:
    """One of ``world_size`` gloo processes: items ``0:split`` go to rank 0, the rest to rank 1, each in two
    updates; every rank writes what ``compute``, ``per_sample`` and ``results`` give it."""
    import json
    from pathlib import Path

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        data = world()
        start, stop = (0, split) if rank == 0 else (split, len(data["preds"]))
        middle = (start + stop) // 2
        out = {}
        for name in NAMES:
            metric = torchmetric(name)
            for a, b in ((start, middle), (middle, stop)):
                preds, inputs = batch(data, name, a, b)
                metric.update(preds, **inputs)
            out[name] = {
                "compute": float(metric.compute()),
                "per_sample": metric.per_sample().tolist(),
                "results": metric.results(),
                "local_items": int(metric._cat(f"{name}_scores").numel())
                if name != "emscore"
                else int(metric._cat("emscore_pred_lengths").numel()),
            }
        # A process without any data (rank 1 here) still takes part in every gather.
        for name in ("clipscore", "emscore"):
            metric = torchmetric(name)
            if rank == 0:
                preds, inputs = batch(data, name, 0, len(data["preds"]))
                metric.update(preds, **inputs)
            out[f"{name}_rank0_only"] = {
                "compute": float(metric.compute()),
                "per_sample": metric.per_sample().tolist(),
            }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()
