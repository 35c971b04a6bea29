"""VATEX-EVAL (Shi et al. 2022, EMScore): 3,000 videos x 6 candidates, 3 ratings (1-5) each, 9 references.

Layout read here (``vid_cans_score_dict.json``, as redistributed with the EMScore data):
``{video_id: {"vid", "cands": [6 captions], "scores": "[[a, b, c] x 6]" (a string, or a list), "refs": [[9 refs]]}}``.
``refs`` may also be a flat list of strings. The EMScore authors' pickles (``candidates_list.pkl`` etc.) are
not read: unpickling untrusted files runs code.
"""

from __future__ import annotations

import ast
import json
import os

import datasets

from capeval.bench._common import find_file, image_path, normalize_caption

VATEX_FEATURES = datasets.Features(
    {
        "item_id": datasets.Value("string"),
        "video_id": datasets.Value("string"),
        "video": datasets.Value("string"),
        "candidate": datasets.Value("string"),
        "references": datasets.Sequence(datasets.Value("string")),
        "human_scores": datasets.Sequence(datasets.Value("float64")),
        "category": datasets.Value("string"),
    }
)
N_ANNOTATORS = 3


def _scores(value, vid: str) -> list[list[float]]:
    if isinstance(value, str):
        value = ast.literal_eval(value)  # a literal, never code
    return [[float(x) for x in row] for row in value]


def load_vatex_eval(path: str | os.PathLike, video_root: str | os.PathLike | None = None) -> datasets.Dataset:
    """VATEX-EVAL: one row per candidate caption.

    Args:
        path: ``vid_cans_score_dict.json`` or the folder holding it.
        video_root: folder of the VATEX validation clips; ``video`` is ``<root>/<video_id>.mp4`` or None.

    Returns:
        Columns ``item_id`` (``<video_id>#<k>``), ``video_id``, ``video``, ``candidate``, ``references``
        (9 strings), ``human_scores`` (3 floats, one per annotator, in annotator order), ``category`` ("").
    """
    file = find_file(
        path,
        ("vid_cans_score_dict.json",),
        "VATEX-EVAL",
        "the EMScore VATEX-EVAL release (ShiYaya/emscore README) or its JSON redistribution",
    )
    with open(file, encoding="utf-8") as f:
        data = json.load(f)
    columns: dict[str, list] = {k: [] for k in VATEX_FEATURES}
    for vid, entry in data.items():
        cands = entry["cands"]
        scores = _scores(entry["scores"], vid)
        refs = entry["refs"]
        if refs and isinstance(refs[0], list):
            if len(refs) != 1:
                raise ValueError(f"{file}: video {vid} has {len(refs)} reference lists; expected one")
            refs = refs[0]
        if len(scores) != len(cands):
            raise ValueError(f"{file}: video {vid} has {len(cands)} candidates but {len(scores)} score rows")
        refs = [normalize_caption(r) for r in refs]
        for k, (cand, s) in enumerate(zip(cands, scores, strict=True)):
            if len(s) != N_ANNOTATORS:
                raise ValueError(
                    f"{file}: video {vid} candidate {k} has {len(s)} ratings; expected {N_ANNOTATORS}"
                )
            columns["item_id"].append(f"{vid}#{k}")
            columns["video_id"].append(vid)
            columns["video"].append(image_path(video_root, f"{vid}.mp4"))
            columns["candidate"].append(normalize_caption(cand))
            columns["references"].append(refs)
            columns["human_scores"].append(s)
            columns["category"].append("")
    info = datasets.DatasetInfo(
        description="VATEX-EVAL (Shi et al. 2022): 3 ratings per video caption", features=VATEX_FEATURES
    )
    return datasets.Dataset.from_dict(columns, features=VATEX_FEATURES, info=info)
