"""Readers of the Pascal-50S and Abstract-50S official files (the CIDEr consensus data).

MATLAB cells as strings and numbers, ``consensus_pascal.mat``'s triplets, ``pascal50S.mat``/``.json``'s sentences
per image, ``pascal_50s_consensus_labels.json``, the ``[{image_id, caption}]`` lists of ``vrama91/cider`` and the
Abstract-50S votes. What each file holds is described in :mod:`capeval.bench.pascal`, which makes the datasets.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capeval.bench._common import normalize_caption, optional_file
from capeval.json_files import read_json_file


def read_mat(path: Path) -> dict:
    """A MATLAB ``.mat`` file's variables by name (scipy's ``loadmat``)."""
    from scipy.io import loadmat

    return loadmat(str(path))


def cell_text(cell) -> str:
    """A MATLAB char cell as a stripped string (``array(['x'])`` or nested object arrays)."""
    while isinstance(cell, np.ndarray):
        if cell.size == 0:
            return ""
        cell = cell.ravel()[0]
    return str(cell).strip()


def cell_number(cell) -> float:
    """A MATLAB numeric cell (possibly nested in object arrays) as a Python number."""
    while isinstance(cell, np.ndarray):
        if cell.size != 1:
            raise ValueError(f"expected one number, got an array of shape {cell.shape}")
        cell = cell.ravel()[0]
    return float(cell)


def read_consensus_triplets(path: str | os.PathLike, n_pairs: int, per_pair: int = 48):
    """``consensus_pascal.mat``: per pair, the references and the vote counts for (sentence 1, sentence 2)."""
    mat = read_mat(Path(path))
    if "triplets" not in mat:
        raise ValueError(f"{path}: no 'triplets' variable (expected the CIDEr consensus layout)")
    trip = mat["triplets"].ravel()
    if len(trip) != n_pairs * per_pair:
        raise ValueError(f"{path}: {len(trip)} triplets for {n_pairs} pairs; expected {per_pair} per pair")
    refs, votes = [], []
    for i in range(n_pairs):
        r, counts = [], [0, 0]
        for t in trip[i * per_pair : (i + 1) * per_pair]:
            # A struct with four fields, or a 1x4 cell: (reference, sentence 1, sentence 2, winner).
            fields = (
                [t[k] for k in range(4)]
                if getattr(t, "dtype", None) is not None and t.dtype.names
                else list(np.asarray(t, dtype=object).ravel())
            )
            ref, winner = fields[0], fields[3]
            r.append(normalize_caption(cell_text(ref)))
            w = int(cell_number(winner))
            if w not in (1, 2):
                raise ValueError(f"{path}: pair {i} has a winner {w}; expected 1 or 2")
            counts[w - 1] += 1
        refs.append(r)
        votes.append(counts)
    return refs, votes


def read_image_sentences(path: Path) -> dict[str, list[str]]:
    """50 sentences per image from ``pascal50S.mat`` (``refs``) or ``pascal50S.json`` (``[{image_id, caption}]``)."""
    if path.suffix == ".json":
        out: dict[str, list[str]] = defaultdict(list)
        for name, caption in read_caption_list(path):
            out[name].append(caption)
        return dict(out)
    mat = read_mat(path)
    if "refs" not in mat:
        raise ValueError(f"{path}: no 'refs' variable (expected pascal50S.mat)")
    out = {}
    for entry in mat["refs"].ravel():
        out[cell_text(entry["image"])] = [
            normalize_caption(cell_text(s)) for s in np.asarray(entry["sent"]).ravel()
        ]
    return out


def read_labels_json(path: Path) -> dict[tuple, list[tuple[str, int, list[str]]]]:
    """``pascal_50s_consensus_labels.json``'s entries ``(category, label, references)`` by ``(image file name,
    caption A, caption B)``, captions normalised, in file order (a pair can be listed more than once)."""
    data = read_json_file(path, "Pascal-50S labels")
    index: dict[tuple, list] = defaultdict(list)
    for cat, entries in data.items():
        for e in entries:
            a, b = (normalize_caption(c) for c in e["captions"])
            index[(Path(e["image"]).name, a, b)].append(
                (cat, int(e["label"]), [normalize_caption(r) for r in e.get("references", [])])
            )
    return index


def read_caption_list(path: Path) -> list[tuple[str, str]]:
    """A ``vrama91/cider`` caption file (``[{"image_id", "caption"}]``) as ``(image_id, caption)`` pairs, captions
    normalised, in file order."""
    data = read_json_file(path, "Abstract-50S captions")
    return [(e["image_id"], normalize_caption(e["caption"])) for e in data]


def read_abstract_votes(path: Path, n: int) -> list[list[int] | int]:
    """Abstract-50S votes: a JSON list aligned with the candidate pairs, each ``{"votes": [b, c]}``,
    ``{"label": 0|1}``, ``[b, c]`` or a label; or a ``.mat`` with 48 consensus ``triplets`` per pair."""
    if path.suffix == ".mat":
        _, votes = read_consensus_triplets(path, n)
        return votes
    data = read_json_file(path, "Abstract-50S votes")
    if len(data) != n:
        raise ValueError(f"{path}: {len(data)} vote entries for {n} candidate pairs")
    out = []
    for k, e in enumerate(data):
        if isinstance(e, dict):
            e = e.get("votes", e.get("label"))
        if isinstance(e, (list, tuple)) and len(e) == 2:
            out.append([int(e[0]), int(e[1])])
        elif e in (0, 1):
            out.append(int(e))
        else:
            raise ValueError(f"{path}: entry {k} is neither [votes B, votes C] nor a label 0/1")
    return out


@dataclass(frozen=True)
class PascalExtras:
    """What the optional Pascal-50S files beside ``pair_pascal.mat`` hold, each empty when its file is absent.

    Attributes:
        consensus_refs: per pair, the 48 references of ``consensus_pascal.mat`` (None without the file).
        consensus_votes: per pair, that file's judgment counts ``[sentence 1, sentence 2]`` (None without it).
        image_refs: ``pascal50S.mat``/``.json``: the 50 sentences of each image, by image name.
        json_index: ``pascal_50s_consensus_labels.json``'s entries ``(category, label, references)`` by
            ``(image name, caption A, caption B)``, in file order.
        labels_name: that JSON file's name (None without it).
    """

    consensus_refs: list[list[str]] | None = None
    consensus_votes: list[list[int]] | None = None
    image_refs: dict[str, list[str]] = field(default_factory=dict)
    json_index: dict[tuple, list[tuple[str, int, list[str]]]] = field(default_factory=dict)
    labels_name: str | None = None


def read_extras(folder: Path, n_pairs: int) -> PascalExtras:
    """Read the optional files of a Pascal-50S folder (consensus judgments, image sentences, JSON labels)."""
    consensus = optional_file(folder, ("consensus_pascal.mat",))
    refs_file = optional_file(folder, ("pascal50S.mat", "pascal50S.json"))
    labels_file = optional_file(folder, ("pascal_50s_consensus_labels.json", "pascal_50s.json"))
    c_refs, c_votes = read_consensus_triplets(consensus, n_pairs) if consensus is not None else (None, None)
    return PascalExtras(
        consensus_refs=c_refs,
        consensus_votes=c_votes,
        image_refs=read_image_sentences(refs_file) if refs_file is not None else {},
        json_index=read_labels_json(labels_file) if labels_file is not None else {},
        labels_name=labels_file.name if labels_file is not None else None,
    )
