"""Helper of tests/test_distributed.py: score a fixed workload in one process or under torchrun.

``python distributed_score_script.py MODEL OUT_DIR single`` scores with the plain API;
``torchrun --nproc_per_node 2 distributed_score_script.py MODEL OUT_DIR sharded`` scores with
``capeval.corpus.distributed.score_distributed``. Each process writes ``OUT_DIR/<mode>-rank<r>.json`` with the
results and how many images and captions it encoded itself.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch


def workload():
    rng = np.random.default_rng(7)
    distinct = [rng.integers(0, 256, (40 + i, 36, 3), dtype=np.uint8) for i in range(17)]
    order = [int(i) for i in rng.integers(0, len(distinct), 29)]  # repeats: de-duplication across shards
    images = [distinct[i] for i in order]
    words = "red green blue circle square triangle left right top bottom a the on at in".split()
    captions = [" ".join(rng.choice(words, size=2 + (i % 9))) for i in range(len(images))]
    captions[5] = captions[2]  # a repeated caption
    references = [[captions[(i + 1) % len(captions)], "a shape " * (1 + i % 4)] for i in range(len(images))]
    videos = [[distinct[(i + k) % len(distinct)][:36, :36] for k in range(2 + i % 3)] for i in range(7)]
    return captions, images, references, videos


def main() -> None:
    model, out_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)  # two processes share two cores; the same in both modes
    import capeval
    import capeval.corpus.distributed as dist_api

    captions, images, references, videos = workload()
    options = dict(model=model, batch_size=4, progress=False)
    counts = {"images": 0, "texts": 0}
    if mode == "single":
        rank = 0
        results = {
            "clipscore": capeval.CLIPScore(device="cpu", **options)(captions, images=images),
            "refclipscore": capeval.RefCLIPScore(device="cpu", **options)(
                captions, references=references, images=images
            ),
        }
        from capeval.emscore import EMScore

        results["emscore"] = EMScore(device="cpu", **options)(captions[:7], videos=videos)
    else:
        real_images, real_batches = dist_api.encode_images, dist_api.encode_batches

        def count_images(backbone, imgs, **kw):
            counts["images"] += len(imgs)
            return real_images(backbone, imgs, **kw)

        def count_batches(backbone, ids, batches, *args, **kw):
            counts["texts"] += sum(len(b) for b in batches)
            return real_batches(backbone, ids, batches, *args, **kw)

        dist_api.encode_images, dist_api.encode_batches = count_images, count_batches
        state = dist_api.process_state()
        rank = state.process_index
        assert state.num_processes == 2, state
        results = {"clipscore": dist_api.score_distributed("clipscore", captions, images=images, **options)}
        encoded = dict(counts)  # what this process encoded for the CLIPScore call
        results |= {
            "refclipscore": dist_api.score_distributed(
                "refclipscore", captions, references=references, images=images, **options
            ),
            "emscore": dist_api.score_distributed("emscore", captions[:7], videos=videos, **options),
        }
        counts = {"clipscore_call": encoded, "world": state.num_processes, "backend": state.backend}
    with open(os.path.join(out_dir, f"{mode}-rank{rank}.json"), "w") as fh:
        json.dump({"results": results, "counts": counts}, fh)
    if torch.distributed.is_initialized():  # as PyTorch asks of a launched script, once no collective is left
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
