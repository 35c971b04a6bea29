"""Scoring shard rows in batches: the work both corpus engines share, so they give the same numbers.

Two steps, split where the CPU work ends:

- ``prepare_rows`` (CPU, no model): decodes each image and applies CLIP's geometric preprocessing
  (``capeval.clip.images.preprocess_image``, the function every capeval image path uses) to a
  (size, size, 3) uint8 array; a row whose image cannot be read gets its ``error``.
- ``RowScorer.score`` (the model): encodes the prepared pixels once per backbone (normalisation happens in
  ``encode_images`` as everywhere else), then calls each metric with ``image_embeds=``, so the captions go
  through the metric's own tokenisation, prompt and maths.

What crosses between the two is a dict of plain columns (lists and numpy arrays of one batch): Ray Data
moves it between processes as it is, and the local engine passes it along in-process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from capeval.clip.image_text_scorer import ImageTextScorer


def check_row_metrics(metrics: Sequence[str]) -> list[str]:
    """The metric names, checked: a non-empty list of distinct per-row image metrics
    (``capeval.registry.row_image_metrics``: their per-row values do not depend on the other rows of a batch,
    so a corpus can be cut anywhere).

    Raises:
        ValueError: an unknown name or a metric whose per-row score depends on the corpus, named.
    """
    from capeval.registry import row_image_metrics, specs

    allowed = row_image_metrics()
    if isinstance(metrics, str):
        metrics = [metrics]
    names = list(metrics)
    if not names:
        raise ValueError(f"give at least one metric ({', '.join(allowed)})")
    for i, name in enumerate(names):
        if name not in allowed:
            known = specs().get(name)
            why = (
                "its per-row scores depend on the whole corpus (IDF), so it cannot be cut into shards"
                if known is not None and not known.per_item
                else "corpus scoring takes the image metrics"
            )
            raise ValueError(f"metric {i} {name!r} cannot score shards: {why} ({', '.join(allowed)})")
    if len(set(names)) != len(names):
        raise ValueError(f"metrics repeat: {names}")
    return names


def prepare_rows(rows: Sequence[Any], image_size: int, out: np.ndarray | None = None) -> dict[str, Any]:
    """Decode and geometrically preprocess one batch of ``ShardRow``s (CPU work, no model).

    A row whose image cannot be read, whatever the decoder raised, gets its ``error`` (the reader has already
    checked everything else, ``capeval.corpus.row_checks``); nothing here ends the batch.

    Args:
        rows: ``capeval.corpus.shards.ShardRow``s.
        image_size: the backbone's input size (``Backbone.image_size``).
        out: (len(rows), size, size, 3) uint8 to write the pixels into (memory shared with the scoring process);
            None: a new array.

    Returns:
        dict: ``key``, ``shard``, ``caption``, ``error`` (lists), ``index`` (int64 (N,)), ``references``
        (list of lists or None), ``origin`` (dicts of ``row_checks.ORIGIN_FIELDS`` or None), ``image_file`` (the
        file a path named, ``image_paths.file_record``, or None), ``pixels`` (N, size, size, 3) uint8 (zeros where
        ``error`` is set).
    """
    from capeval.clip.images import preprocess_image

    if out is None:
        pixels = np.zeros((len(rows), image_size, image_size, 3), dtype=np.uint8)
    elif out.shape != (len(rows), image_size, image_size, 3) or out.dtype != np.uint8:
        wanted = (len(rows), image_size, image_size, 3)
        raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; expected {wanted} uint8")
    else:
        pixels = out
    errors: list[str | None] = []
    for i, row in enumerate(rows):
        error = row.error
        if error is None:
            image = {"bytes": row.image} if isinstance(row.image, bytes) else row.image
            try:
                pixels[i] = preprocess_image(image, i, image_size)
            except (ValueError, TypeError, OSError) as err:
                error = f"image of {row.key} cannot be read: " + str(err).replace(f"image {i}", "image", 1)
            except Exception as err:  # a decoder's own failure on one row's bytes never ends the run
                error = f"image of {row.key} cannot be read: {type(err).__name__}: {err}"
        if error is not None and out is not None:
            pixels[i] = 0  # a reused buffer holds an earlier batch's pixels
        errors.append(error)
    return {
        "key": [r.key for r in rows],
        "shard": [r.shard for r in rows],
        "index": np.array([r.index for r in rows], dtype=np.int64),
        "caption": [r.caption for r in rows],
        "references": [getattr(r, "references", None) for r in rows],
        "origin": [getattr(r, "origin", None) for r in rows],
        "image_file": [getattr(r, "image_file", None) for r in rows],
        "error": errors,
        "pixels": pixels,
    }


def _references_problem(key: str, references, metric: str) -> str | None:
    """Why a row's references cannot be scored (the metric's input check would refuse the whole batch)."""
    from capeval.validation import has_visible_text

    if not references:
        return f"row {key} has no references ({metric} needs them)"
    for j, ref in enumerate(references):
        if not isinstance(ref, str) or not has_visible_text(ref):
            return f"row {key} has an empty reference ({j}: {ref!r}); {metric} needs text in every one"
    return None


def per_row_fields(name: str, result: dict, n: int) -> dict[str, list]:
    """Per-row lists of a metric result: ``scores`` under the metric's name, ``x_scores`` under ``x``."""
    fields: dict[str, list] = {}
    for key, value in result.items():
        if isinstance(value, list) and len(value) == n and key != "details":
            fields[name if key == "scores" else key.removesuffix("_scores")] = value
    return fields


def _text_encoder(scorer: ImageTextScorer, token_ids):
    """``scorer``'s own caption encoding (its model, prompt and batch size), taking the ids already made."""
    from capeval.clip.text_encoding import encode_texts

    def encode(texts):
        options = {"prefix": scorer.prefix, "batch_size": scorer.batch_size, "progress": False}
        return encode_texts(scorer.backbone, texts, token_ids=token_ids, **options)

    return encode


class RowScorer:
    """The asked metrics, built once (one backbone load per model), scoring prepared batches.

    Args:
        metrics: per-row image metric names (``capeval.registry.row_image_metrics``).
        options: metric options (``model``, ``device``, ``dtype``, ``prefix``, ``w``, ``checkpoint``);
            each metric gets those it takes.
        embeddings: also return ``image_embedding`` and ``text_embedding`` (float16) of the first metric.
        raw_cosine: write the ``raw_cosine`` column (with a prompt, a second text forward pass per caption).
    """

    def __init__(
        self,
        metrics: Sequence[str],
        options: dict[str, Any],
        embeddings: bool = False,
        raw_cosine: bool = True,
    ) -> None:
        from capeval.registry import build_scorer, spec

        self.metrics = check_row_metrics(metrics)
        self.scorers = {}
        self.needs_references = {name for name in self.metrics if spec(name).needs("references")}
        self.reads_references = {name for name in self.metrics if spec(name).reads("references")}
        self._row_columns = {name: spec(name).row_columns for name in self.metrics}
        for name in self.metrics:
            taken = spec(name).run_options({**options, "progress": False})
            self.scorers[name] = build_scorer(name, **taken)
        self.embeddings = embeddings
        self.raw_cosine = raw_cosine
        first = self.scorers[self.metrics[0]]
        self.image_size = first.backbone.image_size
        sizes = {s.backbone.image_size for s in self.scorers.values()}
        if len(sizes) > 1:
            raise ValueError(
                f"the metrics' models take different image sizes {sorted(sizes)}: score them in two runs"
            )

    @property
    def signatures(self) -> dict[str, str]:
        return {name: scorer.signature for name, scorer in self.scorers.items()}

    def columns(self) -> list[str]:
        """The score columns this scorer writes, in order: each metric's headline and its ``row_columns``, then
        ``raw_cosine`` (the first metric's model's plain cosine, the number LAION and DataComp threshold)."""
        names: list[str] = []
        for name in self.metrics:
            names += [name, *self._row_columns[name]]
        return [*dict.fromkeys(names), *(["raw_cosine"] if self.raw_cosine else [])]

    def _token_plan(self) -> dict[tuple[int, str], tuple[Any, str, bool]]:
        """Each model and prompt the batch's texts are encoded with: ``(model's id, prompt) -> (backbone, prompt,
        whether references are encoded with it too)``; ``raw_cosine``'s (no prompt) among them."""
        plan: dict[tuple[int, str], tuple[Any, str, bool]] = {}
        for name in self.metrics:
            scorer = self.scorers[name]
            key = (id(scorer.backbone), scorer.prefix)
            reads = name in self.reads_references or (key in plan and plan[key][2])
            plan[key] = (scorer.backbone, scorer.prefix, reads)
        first = self.scorers[self.metrics[0]]
        if self.raw_cosine and first.prefix:
            plan.setdefault((id(first.backbone), ""), (first.backbone, "", False))
        return plan

    def tokenize(self, batch: dict[str, Any]) -> dict[tuple[int, str], dict]:
        """The token ids of a prepared batch's captions (and references, for the prompts a metric reads them with),
        per model and prompt (``text_encoding.tokenize_known``): made where the batch is prepared (the corpus
        engine's workers), so the scoring process tokenises nothing. ``score`` takes them as ``batch["token_ids"]``;
        without them it tokenises itself, to the same ids."""
        from capeval.clip.text_encoding import tokenize_known

        live = [i for i, error in enumerate(batch["error"]) if error is None]
        captions = [batch["caption"][i] for i in live]
        references = [r for i in live for r in (batch["references"][i] or [])]
        return {
            key: tokenize_known(backbone, captions + references if reads else captions, prefix)
            for key, (backbone, prefix, reads) in self._token_plan().items()
        }

    def _optional_columns(self) -> set[str]:
        """Columns a row may lack (NaN) without error: those a metric writes only for rows with references."""
        return {c for name in self.reads_references - self.needs_references for c in self._row_columns[name]}

    def score(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Scores of one prepared batch (``prepare_rows``'s dict), error rows left NaN with their error.

        Returns:
            dict: the batch's ``key``, ``shard``, ``index``, ``caption``, ``error``, one float64 (N,) array per
            score column (``raw_cosine`` last), and with ``embeddings`` the (N, D) float16
            ``image_embedding``/``text_embedding`` (zeros on error rows, which the writer stores as null).
        """
        n = len(batch["key"])
        errors = list(batch["error"])
        live = [i for i in range(n) if errors[i] is None]
        columns = {c: np.full(n, np.nan) for c in self.columns()}
        images: dict[
            int, dict[int, Any]
        ] = {}  # per backbone: row -> image embedding (one encoding per model)
        first_texts: dict[int, Any] = {}  # row -> the first metric's caption embedding
        for name, scorer in self.scorers.items():
            rows = [i for i in live if errors[i] is None]
            if name in self.needs_references:
                for i in rows:
                    errors[i] = _references_problem(batch["key"][i], batch["references"][i], name)
                rows = [i for i in rows if errors[i] is None]
            if rows:
                texts = self._score_metric(name, scorer, batch, live, rows, columns, images)
                if name == self.metrics[0]:
                    first_texts = texts
        self._raw_cosine(batch, [i for i in live if errors[i] is None], columns, images, first_texts)
        self._refuse_non_finite(live, errors, columns)
        out: dict[str, Any] = {
            k: batch[k] for k in ("key", "shard", "index", "caption", "origin", "image_file")
        }
        out.update(columns)
        out["error"] = errors
        if self.embeddings:
            first = self.scorers[self.metrics[0]].backbone
            out["image_embedding"] = np.zeros((n, first.embed_dim), np.float16)
            out["text_embedding"] = np.zeros((n, first.embed_dim), np.float16)
            for i, emb in first_texts.items():
                if errors[i] is None:
                    out["image_embedding"][i] = images[id(first)][i].numpy().astype(np.float16)
                    out["text_embedding"][i] = emb.cpu().numpy().astype(np.float16)
        return out

    def _score_metric(
        self, name: str, scorer: ImageTextScorer, batch, live, rows, columns, images
    ) -> dict[int, Any]:
        """One metric's columns for ``rows`` (images encoded once per backbone, for every live row); returns each
        row's caption embedding."""
        import torch

        from capeval.clip.image_encoding import encode_pixels

        backbone = scorer.backbone
        if id(backbone) not in images:
            # The prepared pixels as they lie (no copy when every row is live), one forward pass for the batch.
            pixels = batch["pixels"] if len(live) == len(batch["key"]) else batch["pixels"][live]
            # Ray's object store hands out read-only arrays: torch warns of them
            if not pixels.flags.writeable:
                pixels = pixels.copy()
            emb = encode_pixels(backbone, torch.from_numpy(pixels), batch_size=max(1, len(live)))
            images[id(backbone)] = dict(zip(live, emb, strict=True))
        groups = [rows]
        if name in self.reads_references and name not in self.needs_references:
            # PAC-S scores a row without references (its RefPAC-S is absent): rows with and without them in two
            # calls, so a row's values never depend on the other rows of its batch.
            groups = [
                [i for i in rows if batch["references"][i]],
                [i for i in rows if not batch["references"][i]],
            ]
        texts: dict[int, Any] = {}
        for group in (g for g in groups if g):
            vectors = torch.stack([images[id(backbone)][i] for i in group])
            refs = [batch["references"][i] for i in group]
            references = refs if name in self.reads_references and all(refs) else None
            captions, references = scorer.checked_inputs([batch["caption"][i] for i in group], references)
            # Encode once, score from the embeddings (the same captions' embeddings are the ones saved).
            known = batch.get("token_ids", {}).get((id(backbone), scorer.prefix))
            caption_emb, reference_emb = scorer.caption_and_reference_embeddings(
                captions, references, encode_texts=_text_encoder(scorer, known)
            )
            result = scorer.score_embeddings(vectors, caption_emb, reference_emb)
            for field, values in per_row_fields(name, result, len(group)).items():
                if field in columns:
                    columns[field][group] = values
            texts.update(zip(group, caption_emb, strict=True))
        return texts

    def _raw_cosine(self, batch, rows, columns, images, first_texts) -> None:
        """``raw_cosine``: the first metric's model's cosine of each image and its caption as written (no prompt,
        no w, no clipping; ``capeval.scores.raw_cosine``); its caption embeddings are reused when it has no prompt."""
        import torch

        from capeval.clip.text_encoding import encode_texts
        from capeval.scores import raw_cosine

        rows = [i for i in rows if i in first_texts]
        if not rows or not self.raw_cosine:
            return
        first = self.scorers[self.metrics[0]]
        if not first.prefix:
            texts = torch.stack([first_texts[i] for i in rows])
        else:
            captions = [batch["caption"][i] for i in rows]
            known = batch.get("token_ids", {}).get((id(first.backbone), ""))
            texts = encode_texts(
                first.backbone, captions, prefix="", batch_size=len(rows), progress=False, token_ids=known
            )
        image = torch.stack([images[id(first.backbone)][i] for i in rows])
        columns["raw_cosine"][rows] = raw_cosine(image, texts.to(image.device)).cpu().numpy()

    def _refuse_non_finite(self, live, errors, columns) -> None:
        """A row whose score came out NaN or infinite (a model that overflows) is an error row; every column of an
        error row is NaN."""
        optional = self._optional_columns()
        # Which rows hold a value that is not finite, found for every row at once; the rows are then named one by one.
        flagged = np.zeros(len(errors), dtype=bool)
        for c, v in columns.items():
            flagged |= ~np.isfinite(v) & ~np.isnan(v) if c in optional else ~np.isfinite(v)
        for i in (i for i in live if flagged[i]):
            bad = {
                c: float(v[i])
                for c, v in columns.items()
                if errors[i] is None and not math.isfinite(v[i]) and not (c in optional and np.isnan(v[i]))
            }
            if bad and errors[i] is None:
                # NaN would poison the corpus mean and every comparison with a threshold.
                errors[i] = f"the model gave a non-finite score ({bad}): try dtype='float32'"
        for i, error in enumerate(errors):
            if error is not None:
                for values in columns.values():
                    values[i] = np.nan
