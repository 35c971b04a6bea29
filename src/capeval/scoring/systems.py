"""Many metrics x many captioning systems on the same images, each image encoded once.

Metric names go through the resolver of ``capeval bench`` (:func:`capeval.scoring.metric_names.resolve_metric`): the
capeval metrics, the pycocoevalcap baselines (``bleu1`` .. ``bleu4``, ``meteor``, ``rougeL``, ``cider``,
``spice``), the groups and ``package.module:callable``. A metric that cannot run here is refused by name before
any model is loaded.

The image metrics of one backbone (CLIP-S, RefCLIP-S; PAC-S and RefPAC-S on theirs) share one encoding of the
images per run, and their captions of every system go to the text encoder together. The other metrics are
called once per system, so a metric whose per-item scores depend on its call (CIDEr's IDF from the references)
sees exactly one system's corpus, as it would alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from capeval.clip.batching import BATCH_SIZE
from capeval.validation import OPTION_RULE_NAMES, check_options, check_predictions, check_references


def column_name(key: str) -> str:
    """The table and per-image name of a metric key (``clipscore`` -> ``CLIPScore``, ``bleu4`` -> ``BLEU-4``).

    The metrics the CLIPScore authors' script writes (``--save_per_instance``) keep its column names (each
    output's declared ``column``); every other metric is named as in ``capeval bench``'s tables.
    """
    from capeval.scoring.metric_names import capeval_outputs, display_name

    outputs = capeval_outputs()
    if key in outputs and outputs[key][1].column:
        return outputs[key][1].column
    return display_name(key)


def per_item_column(key: str) -> str:
    """The per-image name of a metric key: :func:`column_name`, except for the metrics whose corpus score is
    not the mean of their per-image scores (``bleu4`` -> ``sentence BLEU-4``), so a per-image file never holds
    the corpus score's name over numbers of another kind."""
    from capeval.significance.score_names import CORPUS_NOT_MEAN, sentence_name

    return sentence_name(key) if key in CORPUS_NOT_MEAN else column_name(key)


@dataclass
class SystemScores:
    """Scores of several systems on the same images.

    Attributes:
        ids: the images, as the first system's file named them (the order of every per-item list).
        systems: system names, in the order given.
        metrics: metric keys (``clipscore``, ``bleu4``), in the order resolved.
        corpus: ``{system: {metric: corpus score}}``; the mean of the per-item scores, except BLEU and METEOR,
            whose corpus scores are pycocoevalcap's (from the whole corpus's statistics).
        per_item: ``{system: {metric: [score per image]}}``.
        signatures: ``{metric: signature}``.
        corpus_is_mean: ``{metric: whether its corpus score is the mean of its per-item scores}`` (a paired test
            of means then tests the corpus score itself).
        comparisons: ``{system: {metric: capeval.compare's result against the baseline}}`` once compared.
        baseline: the system the others were compared with.
    """

    ids: list
    systems: list[str]
    metrics: list[str]
    corpus: dict[str, dict[str, float]]
    per_item: dict[str, dict[str, list[float]]]
    signatures: dict[str, str]
    corpus_is_mean: dict[str, bool]
    comparisons: dict[str, dict[str, object]] = field(default_factory=dict)
    baseline: str | None = None

    def columns(self) -> dict[str, str]:
        """``{metric key: column name}`` of the corpus scores (``bleu4`` -> ``BLEU-4``, pycocoevalcap's)."""
        return {key: column_name(key) for key in self.metrics}

    def per_instance(self, system: str) -> dict[str, dict[str, float]]:
        """``{image id: {column: score}}`` of one system: the CLIPScore authors' ``--save_per_instance`` file,
        per-image BLEU and METEOR named as sentence scores (``sentence BLEU-4``)."""
        cols = {key: per_item_column(key) for key in self.metrics}
        scores = self.per_item[system]
        return {
            str(image_id): {cols[key]: scores[key][i] for key in self.metrics}
            for i, image_id in enumerate(self.ids)
        }


def resolve_metrics(specs: Sequence[str], **options):
    """``BenchMetric``s of metric names (groups expanded, duplicates dropped), every one able to run here.

    Raises:
        ValueError: an unknown name (from the resolver), or metrics that cannot run here, each named with why.
    """
    from capeval.scoring.metric_names import resolve_metric

    if not specs:
        raise ValueError("no metrics to score")
    resolved, seen = [], set()
    for spec in specs:
        for metric in resolve_metric(spec, **options):
            if metric.key not in seen:
                seen.add(metric.key)
                resolved.append(metric)
    return resolved


def refuse_unavailable(resolved) -> None:
    """Refuse, in one line naming each, the metrics that cannot run here (no model folder, no weights, ...).

    Raises:
        ValueError: ``cannot run <metric>: <why>; <metric>: <why>``.
    """
    why = [f"{m.key}: {reason}" for m in resolved if (reason := m.unavailable())]
    if why:
        raise ValueError("cannot run " + "; ".join(why))


def _checked_captions(name: str, captions: Sequence[str], ids: Sequence) -> list[str]:
    try:
        return check_predictions(captions)
    except (ValueError, TypeError) as err:
        bad = next((i for i, c in enumerate(captions) if not _valid_caption(c)), None)
        where = f", image id {ids[bad]!r}" if bad is not None else ""
        raise type(err)(f"{err} (system {name!r}{where})") from None


def _valid_caption(caption) -> bool:
    try:
        check_predictions([caption])
    except (ValueError, TypeError):
        return False
    return True


def _image_backbone_scorer(metric):
    """The capeval object behind an image metric, when it can take shared image embeddings; else None."""
    get = getattr(metric.fn, "scorer", None)
    if not metric.uses_images or not callable(get):
        return None
    from capeval.clip.image_text_scorer import ImageTextScorer

    scorer = get()
    return scorer if isinstance(scorer, ImageTextScorer) else None


def score_systems(
    systems: Mapping[str, Sequence[str]],
    *,
    images: Sequence | None = None,
    references: Sequence[Sequence[str]] | None = None,
    metrics: Sequence[str] = ("clipscore",),
    ids: Sequence | None = None,
    model: str | None = None,
    checkpoint: str | None = None,
    device: str | None = None,
    dtype: str = "float32",
    batch_size: int = BATCH_SIZE,
    prefix: str | None = None,
    w: float | None = None,
    vectors: str | None = None,
    progress: bool | None = None,
) -> SystemScores:
    """Score every system with every metric on the same images.

    Args:
        systems: ``{name: [caption per image]}``, every list in the order of ``images`` / ``references``.
        images: one image (path, PIL image, array) per position; needed by the image metrics.
        references: one list of reference captions per position; needed by the reference metrics.
        metrics: names understood by ``capeval bench`` (``clipscore``, ``refclipscore``, ``wmd``, ``wembsim``,
            ``bleu1`` .. ``bleu4``, ``meteor``, ``rougeL``, ``cider``, ``spice``, ``pacscore``, groups, ...).
        ids: a name per position for messages and per-image files (default ``0 .. N-1``).
        model, checkpoint, device, dtype, batch_size, prefix, w, vectors, progress: the metrics' options
            (``None``: each metric's default), given to the metrics that take them.

    Returns:
        SystemScores: corpus and per-item scores, a signature per metric.

    Raises:
        ValueError, TypeError: no systems, lists of different lengths, a bad caption (naming the system, the item
            and the image id), a metric that is unknown or cannot run here, or one that needs images or
            references not given; all before any model is loaded.
    """
    inputs = _checked_inputs(systems, images, references, ids)
    options = dict(
        model=model,
        checkpoint=checkpoint,
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        prefix=prefix,
        w=w,
        vectors=vectors,
        progress=progress,
    )
    resolved = resolve_metrics(metrics, **options)
    # Cheapest refusals first: the options' values, then the inputs the metrics need, then what is missing on
    # this machine (model folders, weights): each names its cause without reading any file.
    check_options(**{k: v for k, v in options.items() if v is not None and k in OPTION_RULE_NAMES})
    for needs, given, what in (
        ("uses_images", inputs.images, "images"),
        ("uses_references", inputs.references, "references"),
    ):
        lacking = [m.key for m in resolved if getattr(m, needs) and given is None]
        if lacking:
            raise ValueError(f"{', '.join(lacking)} need(s) {what}; none were given")
    refuse_unavailable(resolved)
    try:
        return _score_every_metric(resolved, inputs)
    finally:
        for metric in resolved:
            metric.close()


@dataclass
class _Inputs:
    """The checked inputs of ``score_systems``: system names, image ids, captions per system, images and
    references (one per position, or None)."""

    names: list[str]
    ids: list
    captions: dict[str, list[str]]
    images: Sequence | None
    references: list[list[str]] | None

    @property
    def n(self) -> int:
        return len(self.ids)


def _checked_inputs(systems, images, references, ids) -> _Inputs:
    """Every system's captions checked (naming the system, the item and the image id), equal lengths.

    Raises:
        ValueError, TypeError: no systems, lists of different lengths, a bad caption or reference list.
    """
    if not systems:
        raise ValueError("no systems to score")
    names = list(systems)
    n = len(systems[names[0]])
    ids = list(range(n)) if ids is None else list(ids)
    if len(ids) != n:
        raise ValueError(f"got {len(ids)} ids for {n} captions")
    captions = {}
    for name in names:
        if len(systems[name]) != n:
            raise ValueError(f"system {name!r} has {len(systems[name])} captions, {names[0]!r} has {n}")
        captions[name] = _checked_captions(name, systems[name], ids)
    if references is not None:
        references = check_references(references, n)
    if images is not None and len(images) != n:
        raise ValueError(f"got {len(images)} images for {n} captions")
    return _Inputs(names, ids, captions, images, references)


def _score_every_metric(resolved, inputs: _Inputs) -> SystemScores:
    """Each metric on every system: image metrics against one encoding of the images per backbone, the others
    one call per system."""
    per_item: dict[str, dict[str, list[float]]] = {name: {} for name in inputs.names}
    corpus: dict[str, dict[str, float]] = {name: {} for name in inputs.names}
    corpus_is_mean: dict[str, bool] = {}
    signatures: dict[str, str] = {}
    image_embeds: dict[int, object] = {}  # id(backbone) -> (N, D) embeddings of the images
    for metric in resolved:  # METEOR's Java loads its tables meanwhile (score_systems closes it)
        metric.start()
    # Every model loads (and a bad model option fails) before any image is encoded.
    scorers = {metric.key: _image_backbone_scorer(metric) for metric in resolved}
    for metric in resolved:
        scorer = scorers[metric.key]
        if scorer is not None:
            per_item_of = _score_images_once(metric, scorer, inputs, image_embeds)
            corpus_is_mean[metric.key] = True
        else:
            per_item_of, corpus_of, corpus_is_mean[metric.key] = _score_per_system(metric, inputs)
            for name, value in corpus_of.items():
                corpus[name][metric.key] = value
        for name in inputs.names:
            per_item[name][metric.key] = per_item_of[name]
            corpus[name].setdefault(metric.key, float(np.mean(per_item_of[name])))
        signatures[metric.key] = metric.signature()
    return SystemScores(
        ids=inputs.ids,
        systems=inputs.names,
        metrics=[m.key for m in resolved],
        corpus=corpus,
        per_item=per_item,
        signatures=signatures,
        corpus_is_mean=corpus_is_mean,
    )


def _score_images_once(metric, scorer, inputs: _Inputs, image_embeds: dict) -> dict[str, list[float]]:
    """One call over every system's captions, against image embeddings computed once per backbone.

    Returns:
        dict: ``{system: [score per image]}``.
    """
    n, names = inputs.n, inputs.names
    key = id(scorer.backbone)
    if key not in image_embeds:
        image_embeds[key] = scorer.image_embeddings(inputs.images, None, n)
    emb = image_embeds[key]
    call = {"image_embeds": emb.repeat(len(names), 1)}
    if metric.uses_references:
        call["references"] = [refs for _ in names for refs in inputs.references]
    out = scorer([c for name in names for c in inputs.captions[name]], **call)
    scores = np.asarray(out[metric.score_key], dtype=np.float64)
    return {name: scores[s * n : (s + 1) * n].tolist() for s, name in enumerate(names)}


def _score_per_system(metric, inputs: _Inputs) -> tuple[dict, dict, bool]:
    """Each system in its own call; a scorer's own corpus score (BLEU, METEOR) when it has one.

    Returns:
        tuple: ``{system: [score per image]}``, ``{system: corpus score}`` (scorers with their own corpus
        score only), and whether the metric's corpus score is the mean of its per-item scores.
    """
    corpus_score = getattr(metric.fn, "corpus_score", None)
    per_item, corpus = {}, {}
    for name in inputs.names:
        captions = inputs.captions[name]
        if callable(corpus_score):
            corpus[name], per_item[name] = corpus_score(captions, inputs.references)
        else:
            per_item[name] = metric.score(captions, inputs.references, inputs.images)
    is_mean = bool(getattr(metric.fn, "corpus_is_mean", True)) if callable(corpus_score) else True
    return per_item, corpus, is_mean


def compare_systems(
    result: SystemScores,
    baseline: str,
    *,
    method: str = "permutation",
    n_resamples: int | None = None,
    confidence: float | None = None,
    seed: int | None = 0,
    correction: str = "none",
) -> SystemScores:
    """Each other system against ``baseline``, per metric: ``capeval.compare_many`` of the per-image scores
    (delta = system - baseline, its confidence interval and p-value), stored in ``result.comparisons``.

    Metrics whose corpus score is not the mean of their per-image scores (BLEU, METEOR) are left out: a paired test
    of per-image means would not test the score in the table.

    Args:
        result: scores of at least two systems.
        baseline: the name of one of them.
        method, n_resamples, confidence, seed, correction: as in :func:`capeval.compare_many` (``None``: its
            defaults).

    Raises:
        ValueError: an unknown baseline, a single system, or a bad option of the test.
    """
    from capeval.significance.paired_tests import compare_many

    if baseline not in result.systems:
        raise ValueError(f"baseline {baseline!r} is not one of the systems {result.systems}")
    others = [name for name in result.systems if name != baseline]
    if not others:
        raise ValueError("a comparison needs at least two systems")
    options = {"method": method, "seed": seed, "correction": correction}
    if n_resamples is not None:
        options["n_resamples"] = n_resamples
    if confidence is not None:
        options["confidence"] = confidence
    comparisons: dict[str, dict[str, object]] = {name: {} for name in others}
    for key in result.metrics:
        if not result.corpus_is_mean[key]:
            continue
        by_system = compare_many(
            result.per_item[baseline][key],
            {name: result.per_item[name][key] for name in others},
            baseline_name=baseline,
            metric=column_name(key),
            **options,
        )
        for name, comparison in by_system.items():
            comparisons[name][key] = comparison
    result.comparisons = comparisons
    result.baseline = baseline
    return result
