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
import io
import json
import os
import pickle
from pathlib import Path

import datasets
import numpy as np

from capeval.bench._common import find_file, image_path, normalize_caption, optional_file

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


class _ArrayUnpickler(pickle.Unpickler):
    """Resolves only numpy's array and dtype constructors; anything else in the file is refused by name.

    numpy arrays pickle as ``_reconstruct`` (an empty array) filled by ``__setstate__`` from the file's bytes,
    so an array may not ask for more memory than the file holds.
    """

    def __init__(self, data: bytes, where: Path) -> None:
        super().__init__(io.BytesIO(data), encoding="latin1")
        self._where = where
        self._limit = len(data)
        core = np._core if hasattr(np, "_core") else np.core
        self._allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
        for module in ("numpy.core", "numpy._core"):  # written by numpy 1.x or 2.x
            self._allowed[f"{module}.multiarray", "_reconstruct"] = self._reconstruct
            self._allowed[f"{module}.multiarray", "scalar"] = core.multiarray.scalar
        for name in dir(getattr(np, "dtypes", None)):
            if name.endswith("DType"):
                self._allowed["numpy.dtypes", name] = getattr(np.dtypes, name)
        self._allowed["_codecs", "encode"] = self._latin1  # protocol-2 bytes

    def _reconstruct(self, subtype, shape, dtype):
        n = int(np.prod(shape, dtype=object)) if isinstance(shape, tuple) else shape
        if subtype is not np.ndarray or not isinstance(n, int) or n * np.dtype(dtype).itemsize > self._limit:
            raise pickle.UnpicklingError(f"{self._where}: refusing an array of shape {shape!r} ({dtype!r})")
        core = np._core if hasattr(np, "_core") else np.core
        return core.multiarray._reconstruct(subtype, shape, dtype)

    def _latin1(self, text, encoding="latin1", errors="strict"):
        if encoding not in ("latin1", "latin-1") or errors != "strict" or not isinstance(text, str):
            raise pickle.UnpicklingError(f"{self._where}: refusing _codecs.encode({encoding!r})")
        return text.encode("latin1")

    def find_class(self, module: str, name: str):
        try:
            return self._allowed[module, name]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self._where}: refusing to load {module}.{name}: only numpy arrays and plain values are read "
                "from the VATEX-EVAL pickles (nothing in the file was run)"
            ) from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"{self._where}: refusing the persistent id {pid!r}")


def read_array_pickle(path: Path) -> list:
    """A pickled numpy array (or list) as nested Python lists, read without running anything in the file."""
    data = path.read_bytes()
    obj = _ArrayUnpickler(data, path).load()
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
    with open(file, encoding="utf-8") as f:
        data = json.load(f)
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
