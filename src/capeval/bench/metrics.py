"""Metric adapters: any scorer, ours or a user's, measured on the same footing.

A benchmark metric is anything callable as ``f(predictions, references=..., images=...)`` returning one
score per prediction (a list, an array, or a dict with ``"scores"``). :class:`BenchMetric` wraps it with what
the runner needs: a display name, whether it reads references and images, whether its per-item scores
depend on the whole call (CIDEr's IDF, EMScore's IDF), and the signature that keys the score cache.

Names understood by :func:`resolve_metric` (and the ``--metrics`` option of ``capeval bench``):

- baselines: ``bleu1`` .. ``bleu4``, ``meteor``, ``rougeL``, ``cider``, ``spice`` (pycocoevalcap), ``length``;
- capeval metrics: ``wmd``, ``wembsim`` (text only), ``clipscore``, ``refclipscore``, ``pacscore``,
  ``refpacscore`` (need images; PAC-S also its checkpoint), ``emscore`` (EMScore(X,X*), references only);
- groups: ``baselines`` (BLEU-1, BLEU-4, METEOR, ROUGE-L, CIDEr, SPICE), ``text`` (WMD, WEmbSim),
  ``image`` (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S);
- ``package.module:attribute``: a user callable, or a class / factory returning one.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence

import numpy as np

from capeval.bench.baselines import CocoBaseline, LengthBaseline

GROUPS = {
    "baselines": ["bleu1", "bleu4", "meteor", "rougeL", "cider", "spice"],
    "text": ["wmd", "wembsim"],
    "image": ["clipscore", "refclipscore", "pacscore", "refpacscore"],
}


class BenchMetric:
    """A scorer plus what the benchmark runner needs to know about it.

    Args:
        fn: ``fn(predictions, references=..., images=...)`` (only the keywords it uses are passed) returning
            per-prediction scores or a dict holding them under ``score_key``.
        key: short id used in tables, the cache and the published-values config (``wmd``, ``bleu4``).
        name: display name (defaults to ``key``).
        uses_references / uses_images: what to pass; a metric that needs images is skipped (with a message)
            on benchmarks whose images are absent.
        corpus_level: per-item scores depend on the other items of the call (IDF weights), so a partly cached
            benchmark setting is recomputed in full.
        signature: cache key; defaults to ``fn.signature``, else the ``"signature"`` of a one-item probe call,
            else ``<key>|callable=<module.qualname>`` (then clear the cache yourself when ``fn`` changes).
        score_key: where a dict result keeps the per-item scores.
        higher_is_better: False for distances (scores are negated for pairwise comparisons and correlations).
    """

    def __init__(
        self,
        fn: Callable,
        key: str,
        name: str | None = None,
        uses_references: bool = True,
        uses_images: bool = False,
        corpus_level: bool = False,
        signature: str | None = None,
        score_key: str = "scores",
        higher_is_better: bool = True,
        unavailable: str | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"metric {key!r} is {type(fn).__name__}, not callable")
        self.fn = fn
        self.key = key
        self.name = name or key
        self.uses_references = bool(uses_references)
        self.uses_images = bool(uses_images)
        self.corpus_level = bool(corpus_level)
        self.score_key = score_key
        self.higher_is_better = higher_is_better
        self._signature = signature
        self._unavailable = unavailable

    def __repr__(self) -> str:
        return f"BenchMetric({self.key!r}, references={self.uses_references}, images={self.uses_images})"

    def unavailable(self) -> str | None:
        """Why the metric cannot run on this machine (missing Java, package, weights), or None."""
        if self._unavailable:
            return self._unavailable
        check = getattr(self.fn, "unavailable", None)
        return check() if callable(check) else None

    def signature(self, probe: tuple[str, list[str] | None, object] | None = None) -> str:
        """The metric's signature; ``probe`` = (candidate, references, image) of one item, used only when the
        scorer does not expose ``.signature``."""
        if self._signature:
            return self._signature
        sig = getattr(self.fn, "signature", None)
        if isinstance(sig, str) and sig:
            self._signature = sig
            return sig
        if probe is not None:
            out = self._call([probe[0]], [probe[1]] if probe[1] is not None else None, [probe[2]])
            if isinstance(out, dict) and isinstance(out.get("signature"), str):
                self._signature = out["signature"]
                return self._signature
        fn = self.fn
        target = fn if hasattr(fn, "__qualname__") else type(fn)
        self._signature = f"{self.key}|callable={target.__module__}.{target.__qualname__}"
        return self._signature

    def _call(self, predictions, references, images):
        kwargs = {}
        if self.uses_references:
            kwargs["references"] = references
        if self.uses_images:
            kwargs["images"] = images
        return self.fn(list(predictions), **kwargs)

    def score(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None = None,
        images: Sequence | None = None,
    ) -> list[float]:
        """Per-prediction scores as floats (never silently shorter: a length mismatch raises)."""
        if self.uses_references and references is None:
            raise ValueError(f"{self.name} needs references")
        if self.uses_images and images is None:
            raise ValueError(f"{self.name} needs images")
        out = self._call(predictions, references, images)
        if isinstance(out, dict):
            if self.score_key not in out:
                raise ValueError(
                    f"{self.name} returned a dict without {self.score_key!r} (keys: {sorted(out)})"
                )
            out = out[self.score_key]
        scores = np.asarray(out, dtype=np.float64).ravel()
        if scores.shape[0] != len(predictions):
            raise ValueError(
                f"{self.name} returned {scores.shape[0]} scores for {len(predictions)} predictions"
            )
        return scores.tolist()

    def close(self) -> None:
        closer = getattr(self.fn, "close", None)
        if callable(closer):
            closer()


def display_name(key: str) -> str:
    """The table name of a metric key (``bleu4`` -> ``BLEU-4``); unknown keys are returned as they are."""
    from capeval.bench.baselines import KINDS

    if key in KINDS:
        return KINDS[key][0]
    if key in CAPEVAL_METRICS:
        return CAPEVAL_METRICS[key][1]
    return key


def _wrap(obj) -> BenchMetric:
    return BenchMetric(
        obj,
        obj.key,
        obj.name,
        uses_references=obj.uses_references,
        uses_images=obj.uses_images,
        corpus_level=obj.corpus_level,
        signature=obj.signature,
    )


_IMAGE_OPTIONS = ("model", "device", "dtype", "batch_size", "prefix", "w", "progress")

# key: (capeval class, display name, uses references, uses images, result key, options it takes)
CAPEVAL_METRICS = {
    "wmd": ("WMD", "WMD", True, False, "scores", ("vectors",)),
    "wembsim": ("WEmbSim", "WEmbSim", True, False, "scores", ("vectors",)),
    "clipscore": ("CLIPScore", "CLIP-S", False, True, "scores", _IMAGE_OPTIONS),
    "refclipscore": ("RefCLIPScore", "RefCLIP-S", True, True, "scores", _IMAGE_OPTIONS),
    "pacscore": ("PACScore", "PAC-S", False, True, "scores", ("checkpoint", *_IMAGE_OPTIONS)),
    "refpacscore": (
        "PACScore",
        "RefPAC-S",
        True,
        True,
        "refpacscore_scores",
        ("checkpoint", *_IMAGE_OPTIONS),
    ),
    # The reference-only variant: VATEX-EVAL without videos. IDF comes from the call's references.
    "emscore": (
        "EMScore",
        "EMScore(X,X*)",
        True,
        False,
        "scores",
        ("checkpoint", "model", "device", "dtype", "batch_size"),
    ),
}
CORPUS_LEVEL = {"emscore"}


def _capeval_metric(key: str, **options) -> BenchMetric:
    import capeval

    class_name, display, uses_refs, uses_images, score_key, takes = CAPEVAL_METRICS[key]
    kwargs = {k: v for k, v in options.items() if v is not None and k in takes}
    unavailable = None
    try:
        cls = getattr(capeval, class_name)
    except AttributeError:
        cls, unavailable = None, f"capeval.{class_name} is not available in this version of capeval"
    if class_name == "PACScore" and "checkpoint" not in kwargs:
        unavailable = "PAC-S needs the authors' weights: pass --checkpoint (see capeval.PACScore)"
    state: dict[str, object] = {}

    def scorer():
        # Built on first use, so a run that skips the metric (no images here) never loads a model.
        if "obj" not in state:
            state["obj"] = cls(**kwargs)
        return state["obj"]

    class Lazy:
        def scorer(self):
            """The capeval metric object itself (``capeval score`` hands it shared image embeddings)."""
            return scorer()

        def __call__(self, predictions, references=None, images=None):
            call = {}
            if uses_refs:
                call["references"] = references
            if uses_images:
                call["images"] = images
            return scorer()(predictions, **call)

        @property
        def signature(self):
            sig = getattr(scorer(), "signature", None)
            # PAC-S and RefPAC-S come from one scorer with one signature: tell their cached scores apart.
            return f"{sig}|output={score_key}" if sig and class_name == "PACScore" else sig

    return BenchMetric(
        Lazy(),
        key,
        display,
        uses_references=uses_refs,
        uses_images=uses_images,
        score_key=score_key,
        corpus_level=key in CORPUS_LEVEL,
        unavailable=unavailable,
        signature=f"{key}|unavailable" if unavailable else None,
    )


def _import(spec: str):
    """``package.module:attr`` or ``path/to/file.py:attr``; the current directory is importable, as with
    ``python -m``. A class is instantiated with no arguments."""
    import os
    import sys
    from pathlib import Path

    module, _, attr = spec.rpartition(":")
    if module.endswith(".py"):
        path = Path(module).expanduser().resolve()
        loader = importlib.util.spec_from_file_location(path.stem, path)
        if loader is None or not path.is_file():
            raise FileNotFoundError(f"metric file not found: {module}")
        obj = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(obj)
    else:
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError:
            if os.getcwd() in sys.path:
                raise
            sys.path.insert(0, os.getcwd())
            obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type):
        obj = obj()
    return obj


def metric_from_callable(fn: Callable, key: str | None = None, **kwargs) -> BenchMetric:
    """Wrap a user callable ``f(predictions, references=None, images=None)``.

    ``uses_references`` / ``uses_images`` default to the callable's own ``uses_references`` / ``uses_images``
    attributes when it has them, else references yes, images no.
    """
    if isinstance(fn, BenchMetric):
        return fn
    key = key or getattr(fn, "key", None) or getattr(fn, "__name__", None) or type(fn).__name__
    kwargs.setdefault("uses_references", getattr(fn, "uses_references", True))
    kwargs.setdefault("uses_images", getattr(fn, "uses_images", False))
    kwargs.setdefault("corpus_level", getattr(fn, "corpus_level", False))
    kwargs.setdefault(
        "name", getattr(fn, "name", None) if isinstance(getattr(fn, "name", None), str) else None
    )
    return BenchMetric(fn, key, **kwargs)


def resolve_metric(spec: str | Callable | BenchMetric, **options) -> list[BenchMetric]:
    """Metrics from a name, a group name, an import spec (``pkg.mod:attr``) or a callable.

    ``options`` (``model``, ``checkpoint``, ``device``, ``dtype``, ``batch_size``, ``vectors``) reach the capeval
    metrics that take them.
    """
    if isinstance(spec, BenchMetric):
        return [spec]
    if callable(spec):
        return [metric_from_callable(spec)]
    if spec in GROUPS:
        return [m for s in GROUPS[spec] for m in resolve_metric(s, **options)]
    if spec in ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rougeL", "cider", "spice"):
        return [_wrap(CocoBaseline(spec))]
    if spec == "length":
        return [_wrap(LengthBaseline())]
    if spec in CAPEVAL_METRICS:
        return [_capeval_metric(spec, **options)]
    if ":" in spec:
        return [metric_from_callable(_import(spec), key=spec.rsplit(":", 1)[1])]
    raise ValueError(
        f"unknown metric {spec!r}: use a baseline (bleu1, bleu4, meteor, rougeL, cider, spice, length), "
        f"a capeval metric ({', '.join(CAPEVAL_METRICS)}), a group ({', '.join(GROUPS)}) "
        "or package.module:callable"
    )
