"""Pascal-50S and Abstract-50S (Vedantam et al. 2015): which of two captions do people prefer?

Pascal-50S official files (``pyCIDErConsensus``, ``cider-matlab/data``):

- ``pair_pascal.mat``: ``new_input`` (image name, sentence 1, sentence 2) for 4,000 pairs, ``category`` 1-4 =
  HC (two correct human captions), HI (human correct vs human incorrect), HM (human vs machine), MM (two
  machine captions), 1,000 each, and ``result``, the 11 per-pair votes (+1: sentence 1, -1: sentence 2).
- ``consensus_pascal.mat``: ``triplets``, 48 per pair in pair order, each ``(reference, sentence 1, sentence 2,
  winner)`` with winner 1 or 2: the 48 consensus judgments the CLIPScore/PAC-S protocol uses, and the 48
  references they were made against.
- ``pascal50S.mat``: ``refs``, 50 sentences for each of the 1,000 images; or the Python CIDEr repository's
  ``pascal50S.json`` (``vrama91/cider`` ``data/``: ``[{"image_id", "caption"}]``, 50 per image), read the same way.
  That repository's ``pascal_candsB.json`` / ``pascal_candsC.json`` hold the 4,000 pairs without categories or
  votes, so they are not a benchmark on their own.
- ``pascal_50s_consensus_labels.json`` (CLIPScore/PAC-S JSON layout): ``{HC|HI|HM|MM: [{image, captions[2],
  label, references[5]}]}`` with the consensus label (index of the preferred caption) already resolved.

Abstract-50S (``cider/data``): ``abstract48S.json`` (48 references per clip-art scene, ``[{image_id, caption}]``)
and ``abstract_candsB.json`` / ``abstract_candsC.json`` (the 400 candidate pairs, B vs C). Its human votes are
not in those files; pass them as ``votes=`` (see :func:`load_abstract50s`).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import datasets
import numpy as np

from capeval.bench._common import (
    PAIR_FEATURES,
    build_dataset,
    find_file,
    image_path,
    normalize_caption,
)
from capeval.bench.pascal_files import (
    PascalExtras,
    cell_text,
    read_abstract_votes,
    read_caption_list,
    read_extras,
    read_mat,
)
from capeval.bench.references import image_key
from capeval.json_files import read_json_file

PASCAL_CATEGORIES = {1: "HC", 2: "HI", 3: "HM", 4: "MM"}
TIE_SEED = 42  # fixed seed for breaking consensus ties, as in the public Pascal-50S loaders

_WHERE = (
    "Pascal-50S files come with the CIDEr consensus data (pyCIDErConsensus.zip: pair_pascal.mat, "
    "consensus_pascal.mat; vrama91/cider-matlab data/: pair_pascal.mat, pascal50S.mat)"
)


def majority_label(votes_a: int, votes_b: int, rng: np.random.Generator) -> tuple[int, bool]:
    """(label, tie): 0 when caption A has more votes, 1 for B; a tie is broken by ``rng``."""
    if votes_a > votes_b:
        return 0, False
    if votes_b > votes_a:
        return 1, False
    return int(rng.integers(0, 2)), True


def _pascal_label(
    i: int, votes11: list[int], json_hit: tuple | None, extras: PascalExtras, rng: np.random.Generator
) -> tuple[list[int], int, bool, str]:
    """Pair ``i``'s label by the loader's priority: consensus judgments, the JSON file's label, the 11 votes.

    Args:
        i: the pair's index in ``pair_pascal.mat``.
        votes11: the pair's 11-vote counts ``[A, B]``.
        json_hit: the pair's entry in the JSON labels (``(category, label, references)``), or None.
        extras: the optional files' contents.
        rng: breaks ties of the vote counts (drawn from only on a tie).

    Returns:
        ``(votes, label, tie, source)``: the counts the label came from (empty for a JSON label), the index of
        the preferred caption, whether a tie was broken, and the ``label_source`` text.
    """
    if extras.consensus_votes is not None:
        votes = extras.consensus_votes[i]
        label, tie = majority_label(votes[0], votes[1], rng)
        return votes, label, tie, "consensus_pascal.mat (48 judgments)"
    if json_hit is not None:
        return [], json_hit[1], False, f"{extras.labels_name} (48-judgment consensus)"
    label, tie = majority_label(votes11[0], votes11[1], rng)
    return votes11, label, tie, "pair_pascal.mat (11 votes)"


def _pascal_references(
    i: int, name: str, candidates: tuple[str, str], json_hit: tuple | None, extras: PascalExtras
) -> list[str]:
    """Pair ``i``'s references by priority: the 48 consensus ones, the image's sentences other than the two
    ``candidates``, the JSON file's draw; else none."""
    if extras.consensus_refs is not None:
        return extras.consensus_refs[i]
    if name in extras.image_refs:
        return [r for r in extras.image_refs[name] if r not in candidates]
    if json_hit is not None:
        return json_hit[2]
    return []


def _take_json_entry(json_index: dict[tuple, list], used: dict[tuple, int], key: tuple) -> tuple | None:
    """The next unused JSON entry of the pair ``key`` (a pair listed twice takes the file's entries in order),
    counted in ``used``; None when there is none left."""
    if key in json_index and used[key] < len(json_index[key]):
        used[key] += 1
        return json_index[key][used[key] - 1]
    return None


def load_pascal50s(
    path: str | os.PathLike,
    image_root: str | os.PathLike | None = None,
    tie_seed: int = TIE_SEED,
) -> datasets.Dataset:
    """Pascal-50S from the official ``.mat`` files: 4,000 rows, 1,000 per category.

    The label (index of the preferred caption) is, by priority: the majority of the 48 consensus judgments
    of ``consensus_pascal.mat`` (ties broken at random with ``tie_seed``); the label of
    ``pascal_50s_consensus_labels.json`` when only that file is present; else the majority of the 11 votes
    of ``pair_pascal.mat`` (``label_source`` says which). References, by priority: the 48 of the consensus
    file; the image's ``pascal50S.mat`` sentences other than the two candidates; the JSON file's five.

    Extra columns: ``votes_11`` (the 11-vote counts for A and B), ``sources`` (``new_data``: which system
    wrote each caption), ``label_source``, ``tie`` (the label came from a tie break).
    """
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    mat = read_mat(find_file(folder, ("pair_pascal.mat",), "Pascal-50S pairs", _WHERE))
    inputs, cats, results = mat["new_input"].ravel(), mat["category"].ravel(), mat["result"].ravel()
    sources = np.asarray(mat.get("new_data", np.zeros((len(inputs), 2))), dtype=np.int64)
    n = len(inputs)
    extras = read_extras(folder, n)
    used: dict[tuple, int] = defaultdict(int)
    rng = np.random.default_rng(tie_seed)
    rows = []
    for i in range(n):
        name, a, b = (cell_text(inputs[i][k]) for k in range(3))
        a, b = normalize_caption(a), normalize_caption(b)
        v = np.asarray(results[i][0] if results.dtype.names else results[i]).ravel().astype(int)
        votes11 = [int((v > 0).sum()), int((v < 0).sum())]
        json_hit = _take_json_entry(extras.json_index, used, (name, a, b))
        votes, label, tie, source = _pascal_label(i, votes11, json_hit, extras, rng)
        rows.append(
            {
                "item_id": f"pascal50s/{i:04d}",
                "image_id": image_key(name),
                "image": image_path(image_root, name),
                "candidates": [a, b],
                "references": _pascal_references(i, name, (a, b), json_hit, extras),
                "votes": votes,
                "label": label,
                "category": PASCAL_CATEGORIES[int(cats[i])],
                "votes_11": votes11,
                "sources": [int(s) for s in sources[i]] if sources.ndim == 2 and len(sources) == n else [],
                "label_source": source,
                "tie": tie,
            }
        )
    return build_dataset(
        rows,
        PAIR_FEATURES,
        {
            "votes_11": datasets.Sequence(datasets.Value("int32")),
            "sources": datasets.Sequence(datasets.Value("int32")),
            "label_source": datasets.Value("string"),
            "tie": datasets.Value("bool"),
        },
        "Pascal-50S (Vedantam et al. 2015): pairwise preferences, categories HC/HI/HM/MM",
    )


def load_pascal50s_json(
    path: str | os.PathLike, image_root: str | os.PathLike | None = None
) -> datasets.Dataset:
    """Pascal-50S in the JSON consensus layout ``{HC|HI|HM|MM: [{image, captions, label, references}]}``.

    The references are the file's fixed draw of five; ``votes`` is empty (the file keeps only the label).
    """
    file = find_file(path, ("pascal_50s_consensus_labels.json", "pascal_50s.json"), "Pascal-50S JSON", _WHERE)
    data = read_json_file(file, "Pascal-50S JSON")
    rows = []
    for cat in ("HC", "HI", "HM", "MM"):
        for k, e in enumerate(data.get(cat, [])):
            if len(e["captions"]) != 2 or int(e["label"]) not in (0, 1):
                raise ValueError(f"{file}: {cat}[{k}] needs two captions and a label 0 or 1")
            name = Path(e["image"]).name
            rows.append(
                {
                    "item_id": f"pascal50s-json/{cat}/{k:04d}",
                    "image_id": image_key(name),
                    "image": image_path(image_root, name),
                    "candidates": [normalize_caption(c) for c in e["captions"]],
                    "references": [normalize_caption(r) for r in e.get("references", [])],
                    "votes": [],
                    "label": int(e["label"]),
                    "category": cat,
                }
            )
    return build_dataset(rows, PAIR_FEATURES, None, f"Pascal-50S consensus labels from {file.name}")


def load_abstract50s(
    path: str | os.PathLike,
    votes: str | os.PathLike | None = None,
    image_root: str | os.PathLike | None = None,
    tie_seed: int = TIE_SEED,
) -> datasets.Dataset:
    """Abstract-50S: 400 rows, candidates ``[B, C]`` with the scene's 48 references.

    Args:
        path: folder with ``abstract48S.json``, ``abstract_candsB.json``, ``abstract_candsC.json``.
        votes: the human judgments, which the public files lack: a JSON list aligned with the pairs (each
            ``{"votes": [b, c]}``, ``{"label": 0|1}``, ``[b, c]`` or ``0|1``) or a ``.mat`` in the consensus
            ``triplets`` layout. Without it ``label`` is -1 and only text statistics can be computed.
    """
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    refs_file = find_file(folder, ("abstract48S.json",), "Abstract-50S references", "vrama91/cider data/")
    cand_b = read_caption_list(find_file(folder, ("abstract_candsB.json",), "Abstract-50S candidates B"))
    cand_c = read_caption_list(find_file(folder, ("abstract_candsC.json",), "Abstract-50S candidates C"))
    if len(cand_b) != len(cand_c):
        raise ValueError(f"{len(cand_b)} B candidates but {len(cand_c)} C candidates")
    refs: dict[str, list[str]] = defaultdict(list)
    for img, cap in read_caption_list(refs_file):
        refs[img].append(cap)
    vote_list = read_abstract_votes(Path(votes), len(cand_b)) if votes is not None else None
    rng = np.random.default_rng(tie_seed)
    rows = []
    for i, ((img_b, b), (img_c, c)) in enumerate(zip(cand_b, cand_c, strict=True)):
        if img_b != img_c:
            raise ValueError(f"pair {i}: candidate B is for {img_b} but C is for {img_c}")
        label, v, tie = -1, [], False
        if vote_list is not None:
            entry = vote_list[i]
            if isinstance(entry, list):
                v = entry
                label, tie = majority_label(entry[0], entry[1], rng)
            else:
                label = entry
        rows.append(
            {
                "item_id": f"abstract50s/{i:03d}",
                "image_id": image_key(img_b),
                "image": image_path(image_root, img_b),
                "candidates": [b, c],
                "references": refs.get(img_b, []),
                "votes": v,
                "label": label,
                "category": "abstract",
                "tie": tie,
            }
        )
    return build_dataset(
        rows,
        PAIR_FEATURES,
        {"tie": datasets.Value("bool")},
        "Abstract-50S (Vedantam et al. 2015): pairwise preferences on clip-art scenes",
    )
