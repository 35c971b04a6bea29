"""The pairwise benchmarks: two captions of one image, and how often the metric prefers the one people do.

Pascal-50S and Abstract-50S compare two candidates against drawn references; FOIL-COCO pairs a correct
caption with its foil, scored with 1 and with 4 references. Each pair becomes two units (``<id>/a``,
``<id>/b``) scored one after the other. ``capeval.bench.benchmarks`` wires these functions into the registry.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np

from capeval.bench import protocols as P
from capeval.bench.benchmark_types import Setting, Unit


def _pair_units(ds: datasets.Dataset, references: list[list[str]] | None = None) -> list[Unit]:
    refs = references if references is not None else ds["references"]
    units = []
    for i, cands, r, img in zip(ds["item_id"], ds["candidates"], refs, ds["image"], strict=True):
        units.append(Unit(f"{i}/a", cands[0], list(r), img))
        units.append(Unit(f"{i}/b", cands[1], list(r), img))
    return units


def _split_pairs(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return scores[0::2], scores[1::2]


# ---------------------------------------------------------------- Pascal-50S / Abstract-50S


def _load_pascal(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.pascal import load_pascal50s, load_pascal50s_json

    if (path / "pair_pascal.mat").is_file():
        return load_pascal50s(path, image_root=opts.get("image_root"))
    return load_pascal50s_json(path, image_root=opts.get("image_root"))


def _load_abstract(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.pascal import load_abstract50s

    votes = opts.get("abstract_votes")
    if votes is None:
        for name in ("abstract50s_votes.json", "consensus_abstract.mat"):
            if (path / name).is_file():
                votes = path / name
    if votes is None:
        raise FileNotFoundError(
            "Abstract-50S human votes are not in the public files (abstract48S.json, abstract_candsB/C.json); "
            "pass them with --abstract-votes (see capeval.bench.pascal.load_abstract50s)"
        )
    return load_abstract50s(path, votes=votes, image_root=opts.get("image_root"))


def _pair_settings(ds, opts):
    n_refs = opts.get("pascal_n_refs", P.PASCAL_N_REFS)
    n_draws = opts.get("pascal_n_draws", P.PASCAL_N_DRAWS)
    refs = ds["references"]
    if all(len(r) <= n_refs for r in refs):
        n_draws = 1  # a fixed set of references (the JSON layout's five): nothing to draw
    draws = P.draw_references(refs, n_refs, n_draws, opts.get("seed", P.PASCAL_SEED))
    return [Setting(f"draw{d}", _pair_units(ds, drawn)) for d, drawn in enumerate(draws)]


def _eval_pairs(order):
    def evaluate(ds, scores, opts):
        labels, cats = ds["label"], ds["category"]
        per_draw = []
        for name in sorted(scores):
            a, b = _split_pairs(scores[name])
            per_draw.append(
                P.accuracy_by_category(
                    a, b, labels, cats, order, ties=opts.get("ties", "half"), seed=opts.get("seed", 0)
                )
            )
        return {k: float(np.mean([d[k] for d in per_draw])) for k in per_draw[0]}

    return evaluate


# ---------------------------------------------------------------- FOIL


def _load_foil(path: Path, opts: dict) -> datasets.Dataset:
    from capeval.bench.foil import load_foil

    return load_foil(path, image_root=opts.get("image_root"))


def _foil_settings(ds, opts):
    refs = ds["references"]
    return [
        Setting("refs1", _pair_units(ds, [list(r[:1]) for r in refs])),
        Setting("refs4", _pair_units(ds, [list(r) for r in refs]), reference_free=False),
    ]


def _eval_foil(ds, scores, opts):
    out = {}
    for name, col in (("refs1", "acc_1ref"), ("refs4", "acc_4ref")):
        if name in scores:
            a, b = _split_pairs(scores[name])
            out[col] = P.accuracy_by_category(
                a, b, ds["label"], ds["category"], ["foil"], ties=opts.get("ties", "half")
            )["foil"]
    if "acc_4ref" not in out and "acc_1ref" in out:
        out["acc_4ref"] = out["acc_1ref"]  # a reference-free metric scores both settings alike
    return out
