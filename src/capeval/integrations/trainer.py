"""``compute_metrics`` for ``transformers.Trainer`` / ``Seq2SeqTrainer``: caption metrics logged during training.

>>> compute_metrics = make_compute_metrics(
...     tokenizer, eval_dataset, metrics=["clipscore", "refclipscore", "wmd"],
...     options={"model": "openai/clip-vit-base-patch32"},
... )  # doctest: +SKIP
>>> trainer = Seq2SeqTrainer(..., eval_dataset=eval_dataset, compute_metrics=compute_metrics,
...     args=Seq2SeqTrainingArguments(..., predict_with_generate=True))  # doctest: +SKIP
>>> trainer.evaluate()  # {"eval_clipscore": ..., "eval_refclipscore": ..., "eval_wmd": ..., ...}  # doctest: +SKIP

The hook decodes the generated ids (and the label ids, ``-100`` included) with the given tokenizer or
processor, pairs prediction ``i`` with row ``i`` of the evaluation dataset (Trainer evaluates in dataset order;
the hook checks the count, and the labels against the dataset when it can), and returns each metric's scalar
results as flat floats. Image metrics read the images from ``image_column`` of that dataset; references
come from ``references_column``, else each decoded label is its prediction's single reference.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from capeval.registry import call_inputs, spec
from capeval.validation import has_visible_text

logger = logging.getLogger(__name__)


def _as_array(x) -> np.ndarray:
    if isinstance(x, tuple):
        # Models that return several outputs: the first is the generated ids (or the logits).
        x = x[0]
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _normalise(text: str) -> str:
    # Decoding may change case and the spaces around punctuation; the words are what must agree.
    return "".join(text.lower().split())


def _column(dataset, start: int, stop: int, column: str) -> list:
    """``dataset[start:stop][column]`` for a ``datasets.Dataset``, else row by row."""
    try:
        import datasets

        if isinstance(dataset, datasets.Dataset):
            if column not in dataset.column_names:
                raise ValueError(
                    f"the evaluation dataset has no column {column!r}; it has {dataset.column_names}"
                )
            return list(dataset[start:stop][column])
    except ImportError:  # pragma: no cover - datasets is a dependency
        pass
    out = []
    for i in range(start, stop):
        row = dataset[i]
        if not isinstance(row, Mapping) or column not in row:
            keys = sorted(row) if isinstance(row, Mapping) else type(row).__name__
            raise ValueError(f"evaluation row {i} has no {column!r} (it has {keys})")
        out.append(row[column])
    return out


def _has_column(dataset, column: str) -> bool:
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return column in names
    try:
        return len(dataset) > 0 and isinstance(dataset[0], Mapping) and column in dataset[0]
    except (TypeError, IndexError, KeyError):
        return False


class CaptionMetrics:
    """The callable ``make_compute_metrics`` returns; Trainer calls it with an ``EvalPrediction``.

    Attributes:
        scorers: metric name -> the capeval scorer (models loaded once, when the hook is made).
        last_predictions: the decoded captions of the last evaluation, in dataset order.
        signatures: metric name -> signature of the last evaluation's numbers (Trainer logs only floats).
    """

    def __init__(
        self,
        tokenizer: Any,
        eval_dataset: Any,
        metrics: Iterable[str] | Mapping[str, Mapping[str, Any]],
        image_column: str = "image",
        references_column: str | None = None,
        label_text_column: str | None = None,
        options: Mapping[str, Any] | None = None,
        empty_predictions: str = "zero",
        distributed: bool | None = None,
    ) -> None:
        if not hasattr(tokenizer, "batch_decode"):
            raise TypeError(
                f"tokenizer must have batch_decode (a tokenizer or processor), got {type(tokenizer).__name__}"
            )
        if empty_predictions not in ("zero", "raise"):
            raise ValueError(f"empty_predictions must be 'zero' or 'raise', got {empty_predictions!r}")
        if not hasattr(eval_dataset, "__len__") or not hasattr(eval_dataset, "__getitem__"):
            raise TypeError(
                "eval_dataset must be indexable with a length (the dataset the Trainer evaluates)"
            )
        per_metric = dict(metrics) if isinstance(metrics, Mapping) else {m: {} for m in metrics}
        if isinstance(metrics, str) or not per_metric:
            raise ValueError("metrics must be a non-empty list of metric names (or a dict name -> options)")
        shared = dict(options or {})
        self.scorers: dict[str, Any] = {}
        for name, own in per_metric.items():
            declared = spec(name)
            if declared.reads("videos"):
                raise ValueError(f"{name} scores videos; the Trainer hooks pair predictions with images")
            # Shared options go where they apply (model to CLIP metrics, vectors to text metrics...);
            # a metric's own options are passed as given, so a misspelt one is an error.
            kwargs = {**declared.run_options(shared), **(own or {})}
            self.scorers[name] = declared.scorer(**kwargs)
        taken = set().union(*(set(spec(n).run_options(shared)) for n in self.scorers))
        unused = sorted(set(shared) - taken)
        if unused:
            raise TypeError(f"option(s) {unused} are taken by none of the metrics {list(self.scorers)}")
        self.needs_images = any("images" in call_inputs(s) for s in self.scorers.values())
        self.tokenizer = tokenizer
        self.eval_dataset = eval_dataset
        self.image_column = image_column
        self.references_column = references_column
        self.label_text_column = label_text_column
        self.empty_predictions = empty_predictions
        self.distributed = distributed
        if self.needs_images and len(eval_dataset) and not _has_column(eval_dataset, image_column):
            raise ValueError(f"the evaluation dataset has no image column {image_column!r}")
        self.last_predictions: list[str] = []
        self.signatures: dict[str, str] = {}
        self._pending: list[tuple[list[str], list[str] | None]] = []

    # -- decoding ------------------------------------------------------------------------------------
    def _pad_id(self) -> int:
        tok = getattr(self.tokenizer, "tokenizer", self.tokenizer)  # processors wrap a tokenizer
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(tok, attr, None)
            if value is not None:
                return int(value)
        return 0

    def decode(self, ids, what: str = "predictions") -> list[str]:
        """Token ids (N, L) to stripped captions; ``-100`` (Trainer's padding) becomes the pad token."""
        arr = _as_array(ids)
        if arr.ndim == 3 and np.issubdtype(arr.dtype, np.floating):
            raise ValueError(
                f"{what} are logits {arr.shape}, not generated ids: use Seq2SeqTrainer with "
                "predict_with_generate=True (or preprocess_logits_for_metrics=lambda logits, labels: "
                "logits.argmax(-1) for teacher-forced tokens)"
            )
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise ValueError(f"{what} must be token ids of shape (N, L), got shape {arr.shape}")
        arr = np.where(arr < 0, self._pad_id(), arr).astype(np.int64)
        texts = self.tokenizer.batch_decode(arr.tolist(), skip_special_tokens=True)
        return [t.strip() for t in texts]

    # -- Trainer entry point ---------------------------------------------------------------------------
    def __call__(self, eval_pred, compute_result: bool | None = None) -> dict[str, float]:
        """Score an ``EvalPrediction``; with ``batch_eval_metrics`` Trainer passes ``compute_result``."""
        predictions, label_ids = eval_pred.predictions, eval_pred.label_ids
        preds = self.decode(predictions)
        labels = self.decode(label_ids, "label_ids") if label_ids is not None else None
        if labels is not None and len(labels) != len(preds):
            raise ValueError(f"got {len(labels)} label rows for {len(preds)} predictions")
        if compute_result is None:
            return self.score(preds, labels)
        self._pending.append((preds, labels))
        if not compute_result:
            return {}
        batches, self._pending = self._pending, []
        preds = [p for b, _ in batches for p in b]
        labels = None if any(lb is None for _, lb in batches) else [x for _, lb in batches for x in lb]
        return self.score(preds, labels)

    # -- pairing and scoring ---------------------------------------------------------------------------
    def _check_alignment(self, labels: list[str] | None) -> None:
        if labels is None or self.label_text_column is None:
            return
        expected = _column(self.eval_dataset, 0, len(labels), self.label_text_column)
        for i, (got, want) in enumerate(zip(labels, expected, strict=True)):
            options = [want] if isinstance(want, str) else list(want)
            g = _normalise(got)
            # Labels may be truncated to the generation length: a prefix of the text agrees.
            if not any(_normalise(w).startswith(g) and (g or not _normalise(w)) for w in options):
                raise ValueError(
                    f"evaluation row {i}: the label ids decode to {got!r} but eval_dataset[{i}]"
                    f"[{self.label_text_column!r}] is {want!r}: the dataset given to the hook is not the one "
                    "the Trainer evaluates, or not in its order"
                )

    def _references(self, labels: list[str] | None, n: int) -> list[list[str]] | None:
        if self.references_column is not None:
            refs = _column(self.eval_dataset, 0, n, self.references_column)
            return [[r] if isinstance(r, str) else list(r) for r in refs]
        if labels is None:
            return None
        return [[lb] for lb in labels]

    def score(self, predictions: list[str], labels: list[str] | None = None) -> dict[str, float]:
        """Score decoded captions against the evaluation dataset's rows ``0..N-1``."""
        n = len(predictions)
        size = len(self.eval_dataset)
        if n != size:
            raise ValueError(
                f"got {n} predictions for an evaluation dataset of {size} rows: give the hook the dataset the "
                "Trainer evaluates (same rows, same order; with dataloader_drop_last=True the last partial "
                "batch is missing)"
            )
        self._check_alignment(labels)
        self.last_predictions = list(predictions)
        empty = [i for i, p in enumerate(predictions) if not has_visible_text(p)]
        if empty and self.empty_predictions == "raise":
            raise ValueError(f"prediction {empty[0]} decoded to an empty caption ({len(empty)} empty in all)")
        if empty:
            logger.warning("%d of %d predictions decoded to empty captions: they score 0", len(empty), n)
        keep = sorted(set(range(n)) - set(empty))
        scale = len(keep) / n
        images = _column(self.eval_dataset, 0, n, self.image_column) if self.needs_images else None
        references = self._references(labels, n)
        out: dict[str, float] = {}
        for name, scorer in self.scorers.items():
            takes = call_inputs(scorer)
            kwargs: dict[str, Any] = {}
            if "images" in takes:
                kwargs["images"] = [images[i] for i in keep]
            if "references" in takes and references is not None:
                bad = [i for i in keep if not references[i] or not all(map(has_visible_text, references[i]))]
                if bad:
                    raise ValueError(
                        f"evaluation row {bad[0]} has an empty reference (decoded labels or "
                        f"{self.references_column!r}); {name} needs references"
                    )
                kwargs["references"] = [references[i] for i in keep]
            if not keep:
                result: dict[str, Any] = {name: 0.0}
            else:
                run = self._runner(scorer)
                result = run([predictions[i] for i in keep], **kwargs)
            self.signatures[name] = result.get("signature", "")
            out.update(self._flatten(name, result, scale))
        out["empty_predictions"] = len(empty)
        return out

    def _runner(self, scorer):
        distributed = self.distributed
        if distributed is None:
            import torch.distributed as dist

            distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if distributed and hasattr(scorer, "backbone"):
            from functools import partial

            from capeval.corpus.distributed import score_sharded

            return partial(score_sharded, scorer)
        return scorer

    @staticmethod
    def _flatten(name: str, result: Mapping[str, Any], scale: float) -> dict[str, float]:
        """Scalar results as ``name`` (the headline) and ``name_key``; lists and strings are not logged.

        Empty predictions were left out of the call: means are rescaled so they count as 0 (``scale`` is
        the fraction scored; 1.0 leaves the metric's own floats untouched).
        """
        flat: dict[str, float] = {}
        for key, value in result.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                continue
            flat[name if key == name else f"{name}_{key}"] = (
                float(value) * scale if scale != 1.0 else float(value)
            )
        return flat


def make_compute_metrics(
    tokenizer: Any,
    eval_dataset: Any,
    metrics: Sequence[str] | Mapping[str, Mapping[str, Any]] = ("clipscore",),
    *,
    image_column: str = "image",
    references_column: str | None = None,
    label_text_column: str | None = None,
    options: Mapping[str, Any] | None = None,
    empty_predictions: str = "zero",
    distributed: bool | None = None,
) -> CaptionMetrics:
    """A ``compute_metrics`` for ``Trainer``/``Seq2SeqTrainer`` (``predict_with_generate=True``).

    Args:
        tokenizer: the captioner's tokenizer or processor (anything with ``batch_decode``).
        eval_dataset: the dataset the Trainer evaluates, with its image column (a ``datasets.Dataset`` or
            any indexable of dicts), in the same order. Trainer drops unused columns from its own copy
            only, so the dataset passed as ``eval_dataset=`` can be given here as is.
        metrics: metric names (``clipscore``, ``refclipscore``, ``pacscore``, ``wmd``, ``wembsim``), or a dict
            name -> that metric's own options.
        image_column: column holding each row's image (PIL, path, array or ``datasets`` Image).
        references_column: column of reference captions (a list of strings or one string per row); ``None``
            uses each decoded label as its prediction's single reference.
        label_text_column: column whose text the labels were made from (a string or list of strings per row);
            when given, every decoded label must match its row, which proves the pairing by index.
        options: options shared by the metrics that take them (``model``, ``device``, ``dtype``,
            ``batch_size``, ``vectors``, ``checkpoint``...); one taken by no metric is an error.
        empty_predictions: ``"zero"`` (an empty decoded caption scores 0 in every metric and is counted under
            ``empty_predictions``) or ``"raise"``.
        distributed: share image encoding across processes with ``capeval.corpus.distributed``; ``None`` does so
            when torch.distributed is initialised with several processes (multi-GPU training).

    Returns:
        CaptionMetrics: call it with an ``EvalPrediction``; returns ``{metric: float, metric_extra: float, ...,
        "empty_predictions": int}`` which Trainer logs with its ``eval_`` prefix.
    """
    return CaptionMetrics(
        tokenizer,
        eval_dataset,
        metrics,
        image_column=image_column,
        references_column=references_column,
        label_text_column=label_text_column,
        options=options,
        empty_predictions=empty_predictions,
        distributed=distributed,
    )
