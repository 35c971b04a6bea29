"""VATEX-EVAL (Shi et al. 2022, EMScore): 3,000 videos x 6 candidates, 3 ratings (1-5) each, 9 references.

Two layouts are read:

- the EMScore authors' release (ShiYaya/emscore README, "VATEX-EVAL": a Google Drive folder read by their
  ``VATEX-EVAL-demo.py``): four pickled numpy arrays, ``candidates_list.pkl`` (18,000 captions),
  ``gts_list.pkl`` (18,000 rows of references), ``human_scores.pkl`` (54,000 ratings, annotator-major: the
  demo takes ``reshape(3, -1).T``) and ``video_ids.pkl`` (18,000 video ids, one per candidate). They are read
  by an unpickler that builds numpy arrays and plain values only (nothing in the files is run);
- ``vid_cans_score_dict.json``, the JSON redistribution other evaluation code passes around
  (Multimodal-Intelligence-Lab/Video-Comprehension-Score ``exp/data/vatex-eval/``): ``{video_id: {"vid",
  "cands": [6 captions], "scores": "[[a, b, c] x 6]" (a string, or a list), "refs": [[9 refs]]}}``; ``refs``
  may also be a flat list of strings.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import datasets
import numpy as np

from capeval.bench._common import find_file, image_path, normalize_caption, optional_file
from capeval.json_files import read_json_file
from capeval.text.array_pickle import TableUnpickler, array_globals

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
JSON_NAME = "vid_cans_score_dict.json"
PICKLE_NAMES = ("candidates_list.pkl", "gts_list.pkl", "human_scores.pkl", "video_ids.pkl")


def read_array_pickle(path: Path) -> list:
    """A pickled numpy array (or list) as nested Python lists, read without running anything in the file."""
    data = path.read_bytes()
    # numpy arrays and plain values only, through the table the gensim reader also uses: nothing in the file runs.
    obj = TableUnpickler(data, array_globals(len(data)), f"the VATEX-EVAL pickle {path}").load()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, list):
        return obj
    raise ValueError(f"{path}: expected a numpy array or a list, got {type(obj).__name__}")


def _scores(value, vid: str) -> list[list[float]]:
    if isinstance(value, str):
        value = ast.literal_eval(value)  # a literal, never code
    return [[float(x) for x in row] for row in value]


def load_vatex_eval(path: str | os.PathLike, video_root: str | os.PathLike | None = None) -> datasets.Dataset:
    """VATEX-EVAL: one row per candidate caption, in either layout of the module docstring.

    Args:
        path: the folder of the authors' four pickles, one of those pickles, ``vid_cans_score_dict.json``, or
            the folder holding it (the JSON wins when a folder holds both).
        video_root: folder of the VATEX validation clips; ``video`` is ``<root>/<video_id>.mp4`` or None.

    Returns:
        Columns ``item_id`` (``<video_id>#<k>``, k counting that video's candidates), ``video_id``, ``video``,
        ``candidate``, ``references`` (9 strings), ``human_scores`` (3 floats, one per annotator, in annotator
        order), ``category`` ("").
    """
    p = Path(path).expanduser()
    if not (p.is_file() and p.suffix == ".json") and optional_file(p, (JSON_NAME,)) is None:
        if optional_file(p, PICKLE_NAMES[:1]) is not None:
            return _load_pickles(p if p.is_dir() else p.parent, video_root)
    file = find_file(
        path,
        (JSON_NAME,),
        "VATEX-EVAL",
        f"the EMScore VATEX-EVAL release ({', '.join(PICKLE_NAMES)}; ShiYaya/emscore README) or its JSON "
        "redistribution",
    )
    data = read_json_file(file, "VATEX-EVAL JSON")
    entries = (
        (vid, e["cands"], _scores(e["scores"], vid), _json_refs(e["refs"], len(e["cands"]), file, vid))
        for vid, e in data.items()
    )
    return _from_entries(file, entries, video_root)


def _load_pickles(folder: Path, video_root) -> datasets.Dataset:
    missing = [n for n in PICKLE_NAMES if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"VATEX-EVAL: {', '.join(missing)} missing from {folder} (the release has all four)"
        )
    cands, refs, scores, vids = (read_array_pickle(folder / n) for n in PICKLE_NAMES)
    n = len(cands)
    flat = np.asarray(scores, dtype=float).reshape(-1)
    if len(refs) != n or len(vids) != n or flat.size != N_ANNOTATORS * n:
        raise ValueError(
            f"{folder}: {n} candidates, {len(refs)} reference rows, {len(vids)} video ids and {flat.size} ratings; "
            f"expected equal counts and {N_ANNOTATORS} ratings per candidate"
        )
    # annotator-major, as VATEX-EVAL-demo.py reads it (reshape(3, -1).T)
    per_candidate = flat.reshape(N_ANNOTATORS, n).T.tolist()
    grouped: dict[str, tuple[list, list, list]] = {}
    for k, vid in enumerate(vids):
        entry = grouped.setdefault(str(vid), ([], [], []))
        entry[0].append(cands[k])
        entry[1].append(per_candidate[k])
        entry[2].append(list(refs[k]))
    return _from_entries(folder, ((v, *e) for v, e in grouped.items()), video_root)


def _json_refs(refs: list, n: int, file, vid) -> list[list[str]]:
    """The JSON layout's one reference list per video, as one list per candidate."""
    if refs and isinstance(refs[0], list):
        if len(refs) != 1:
            raise ValueError(f"{file}: video {vid} has {len(refs)} reference lists; expected one")
        refs = refs[0]
    return [refs] * n


def _from_entries(file, entries, video_root) -> datasets.Dataset:
    """Rows from ``(video id, candidates, score rows, references per candidate)`` per video."""
    columns: dict[str, list] = {k: [] for k in VATEX_FEATURES}
    for vid, cands, scores, refs in entries:
        if len(scores) != len(cands):
            raise ValueError(f"{file}: video {vid} has {len(cands)} candidates but {len(scores)} score rows")
        for k, (cand, s, r) in enumerate(zip(cands, scores, refs, strict=True)):
            if len(s) != N_ANNOTATORS:
                raise ValueError(
                    f"{file}: video {vid} candidate {k} has {len(s)} ratings; expected {N_ANNOTATORS}"
                )
            columns["item_id"].append(f"{vid}#{k}")
            columns["video_id"].append(vid)
            columns["video"].append(image_path(video_root, f"{vid}.mp4"))
            columns["candidate"].append(normalize_caption(cand))
            columns["references"].append([normalize_caption(x) for x in r])
            columns["human_scores"].append(s)
            columns["category"].append("")
    info = datasets.DatasetInfo(
        description="VATEX-EVAL (Shi et al. 2022): 3 ratings per video caption", features=VATEX_FEATURES
    )
    return datasets.Dataset.from_dict(columns, features=VATEX_FEATURES, info=info)
