"""Panels of the text metrics: WMD (with its word-to-word transport flows) and WEmbSim (per-reference cosines).

Text only: candidate captions and reference captions, one per line; every candidate is compared with all
the references. Word vectors are chosen from a fixed list (the packaged GloVe-6B-50d by default).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import gradio as gr
import numpy as np

from capeval.demo.choices import resolve, vector_choices
from capeval.demo.limits import InputError, check_texts, split_lines
from capeval.demo.panel import Panel, Scored, choice_dropdown
from capeval.demo.render import Row, heatmap

_EXAMPLES = (
    (
        "a man is riding a horse on the beach\na person rides a horse near the sea\n"
        "a dog sleeps on a sofa\na woman is cooking dinner in a kitchen",
        "a man riding a brown horse along the shore\nsomeone on horseback at the beach",
    ),
    (
        "two children play football in a park\nkids are playing soccer on the grass\na cat sits on a wall",
        "two boys playing soccer in a field\nchildren kicking a ball on a lawn",
    ),
)


class TextPanel(Panel):
    """Shared inputs, options and checks of the text panels."""

    def build_inputs(self) -> dict:
        return {
            "captions": gr.Textbox(
                label="Candidate captions (one per line)", lines=4, elem_id="captions-input"
            ),
            "references": gr.Textbox(
                label="Reference captions (one per line; every candidate is compared with all of them)",
                lines=3,
                elem_id="references-input",
            ),
        }

    def build_options(self) -> dict:
        return {
            "vectors": choice_dropdown(vector_choices(), "Word vectors", "vectors-option"),
            "normalize_vectors": gr.Checkbox(
                value=False, label="Unit-length word vectors (gensim 4's variant; off = the toolkit's)"
            ),
        }

    def examples(self) -> tuple[list[str], list[list]]:
        return ["captions", "references"], [list(e) for e in _EXAMPLES]

    def _texts(self, captions, references, vectors) -> tuple[list[str], list[str], str | None]:
        cands = check_texts(split_lines(captions), "caption", self.limits.max_captions, self.limits)
        refs = check_texts(split_lines(references), "reference", self.limits.max_references, self.limits)
        return cands, refs, resolve(vector_choices(), vectors, "word vectors").spec


@dataclass
class Flows:
    """Optimal transport between a candidate's words and a reference's words (Kusner et al. 2015).

    Attributes:
        candidate_words: in-vocabulary, non-stopword words of the candidate (distinct, in order).
        reference_words: the same for the reference.
        plan: (len(candidate_words), len(reference_words)) mass moved from each word to each word.
        cost: the same shape, Euclidean distance between the two words' vectors.
        distance: sum(plan * cost), the WMD.
    """

    candidate_words: list[str]
    reference_words: list[str]
    plan: np.ndarray
    cost: np.ndarray
    distance: float


def transport_flows(scorer, candidate: str, reference: str) -> Flows | None:
    """The WMD transport plan of one pair, with the scorer's words, weights and vectors.

    Uses ``capeval.text.documents.prepare`` (the metric's tokenisation, stopwords, vocabulary and nBOW
    weights) and POT's exact solver, so ``distance`` equals the metric's WMD for the pair. ``None`` when
    either side has no in-vocabulary word.
    """
    import ot

    from capeval.text.documents import prepare

    prepared = prepare(
        [candidate, reference], scorer.vectors, scorer.stopwords, scorer.tokenizer, scorer.normalize_vectors
    )
    docs = prepared.documents

    def side(k: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        lo, hi = docs.ptr[k], docs.ptr[k + 1]
        words = docs.words[lo:hi]
        return [docs.vocabulary[w] for w in words], docs.weights[lo:hi], docs.embeddings[words]

    cw, ca, ce = side(int(prepared.doc[0]))
    rw, rb, re_ = side(int(prepared.doc[1]))
    if not cw or not rw:
        return None
    cost = np.sqrt(((ce[:, None, :] - re_[None, :, :]) ** 2).sum(-1))
    plan = ot.emd(ca, rb * (ca.sum() / rb.sum()), cost)
    return Flows(cw, rw, plan, cost, float((plan * cost).sum()))


def flows_html(items: list[tuple[str, str, Flows | None]]) -> str:
    """Per candidate (ranked), its best reference and the word-to-word flows, largest first."""
    parts = []
    for cand, ref, flows in items:
        head = f"<p><b>{html.escape(cand)}</b> &rarr; best reference: <i>{html.escape(ref)}</i></p>"
        if flows is None:
            parts.append(head + "<p>No in-vocabulary word on one side: nothing to transport.</p>")
            continue
        rows = []
        order = np.dstack(np.unravel_index(np.argsort(-flows.plan, axis=None), flows.plan.shape))[0]
        for i, j in order:
            mass = flows.plan[i, j]
            if mass <= 1e-9:
                break
            rows.append(
                f"<tr><td>{html.escape(flows.candidate_words[i])}</td>"
                f"<td>{html.escape(flows.reference_words[j])}</td>"
                f'<td class="num">{mass:.3f}</td><td class="num">{flows.cost[i, j]:.3f}</td></tr>'
            )
        parts.append(
            head + '<table class="capeval-ranked capeval-flows"><thead><tr><th>candidate word</th>'
            "<th>reference word</th><th>mass moved</th><th>word distance</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            f"<p>WMD = sum of mass x distance = {flows.distance:.4f}</p>"
        )
    return '<div id="wmd-flows">' + "".join(parts) + "</div>"


class WMDPanel(TextPanel):
    metric = "wmd"
    title = "WMD (Word Mover's Distance)"
    headline = "WMD score"
    scale = None
    summary = (
        "Type candidate captions and reference captions, one per line. WMD is the least total distance the "
        "candidate's words must travel in word-vector space to become a reference's words; the score is "
        "exp(-WMD) with the closest reference (1 = same words, towards 0 = unrelated). Below the ranking: "
        "which word moved to which."
    )

    def build_extra_outputs(self) -> dict:
        return {
            "flows_plot": gr.Plot(
                label="Transport flows of the best candidate", show_label=False, elem_id="flows-plot"
            ),
            "flows": gr.HTML(elem_id="flows-table"),
        }

    def score(self, captions="", references="", vectors=None, normalize_vectors=False) -> Scored:
        from capeval.wmd import WMD

        cands, refs, spec = self._texts(captions, references, vectors)
        scorer = WMD(vectors=spec, normalize_vectors=bool(normalize_vectors))
        result = scorer(cands, [refs] * len(cands))
        best = scorer.last_stats.best_reference
        rows, items, best_refs = [], [], []
        for i, cand in enumerate(cands):
            ref = refs[best[i]] if best[i] >= 0 else refs[0]
            rows.append(Row(cand, result["scores"][i], {"WMD": result["distances"][i]}))
            best_refs.append(ref)
        order = sorted(range(len(cands)), key=lambda i: -result["scores"][i])
        for i in order:
            ref = best_refs[i]
            items.append((cands[i], ref, transport_flows(scorer, cands[i], ref) if best[i] >= 0 else None))
        top = items[0][2]
        plot = None
        if top is not None:
            plot = heatmap(
                top.plan,
                top.candidate_words,
                top.reference_words,
                f"Mass moved (WMD {top.distance:.3f})",
                "reference words",
                "candidate words",
                cmap="Blues",
            )
        return Scored(
            rows=rows,
            corpus=result["wmd"],
            extras={"flows_plot": plot, "flows": flows_html(items)},
            result=result,
        )


class WEmbSimPanel(TextPanel):
    metric = "wembsim"
    title = "WEmbSim"
    headline = "WEmbSim"
    summary = (
        "Type candidate captions and reference captions, one per line. WEmbSim averages each caption's word "
        "vectors and takes the cosine with each reference's average (shown per reference below); a caption's "
        "score is the mean of those cosines (1 = same direction, 0 = unrelated)."
    )

    def build_options(self) -> dict:
        options = super().build_options()
        options["reduction"] = gr.Radio(
            choices=["mean", "max", "min"], value="mean", label="Combine the reference cosines by"
        )
        return options

    def build_extra_outputs(self) -> dict:
        return {
            "cosines_plot": gr.Plot(
                label="Cosine per candidate and reference", show_label=False, elem_id="cosines-plot"
            )
        }

    def score(
        self, captions="", references="", vectors=None, normalize_vectors=False, reduction="mean"
    ) -> Scored:
        from capeval.wembsim import REDUCTIONS, WEmbSim

        if reduction not in REDUCTIONS:
            raise InputError(f"reduction must be one of {', '.join(REDUCTIONS)}")
        cands, refs, spec = self._texts(captions, references, vectors)
        scorer = WEmbSim(vectors=spec, reduction=reduction, normalize_vectors=bool(normalize_vectors))
        result = scorer(cands, [refs] * len(cands))
        per_ref = result["reference_scores"]
        rows = []
        for i, cand in enumerate(cands):
            extra = {f"ref {j + 1}": (np.nan if c is None else c) for j, c in enumerate(per_ref[i])}
            rows.append(Row(cand, result["scores"][i], extra))
        matrix = np.array([[np.nan if c is None else c for c in r] for r in per_ref], dtype=float)
        plot = heatmap(
            matrix,
            cands,
            [f"ref {j + 1}: {r[:40]}" for j, r in enumerate(refs)],
            "Cosine of mean word vectors",
            "references",
            "candidates",
        )
        return Scored(rows=rows, corpus=result["wembsim"], extras={"cosines_plot": plot}, result=result)
