"""RefCLIPScore: CLIPScore combined with reference captions (Hessel et al., EMNLP 2021), as an evaluate module.

The maths lives in the capeval package (capeval.RefCLIPScore); this module declares the inputs and passes
the options through.
"""

import evaluate

import capeval

_CITATION = """\
@inproceedings{hessel2021clipscore,
  title     = {{CLIPScore}: A Reference-free Evaluation Metric for Image Captioning},
  author    = {Hessel, Jack and Holtzman, Ari and Forbes, Maxwell and Le Bras, Ronan and Choi, Yejin},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  pages     = {7514--7528},
  year      = {2021},
}
"""

_DESCRIPTION = """\
RefCLIPScore extends CLIPScore with references: the harmonic mean of CLIP-S(c, v) and the best cosine
similarity between the caption and its references, RefCLIP-S = H-Mean(CLIP-S(c, v), max_r cos(E_c, E_r)).
As in the authors' code, references get the same "A photo depicts" prompt and the text side is neither
clipped nor rescaled (set clip_reference_cosine=True for the paper's max(cos, 0)). Where both terms are 0
the score is 0, not the NaN of the original code.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    references (`list` of `list` of `str`): the reference captions of each prediction (at least one each).
    images (`list`): one image per prediction: PIL images, file paths, numpy arrays (H, W, C),
        torch tensors (C, H, W) or `datasets` Image dicts. An input like `predictions`: `add_batch` and
        `add` take them too, and they pass evaluate's cache unchanged (paths as paths, in-memory images
        encoded losslessly, read back by capeval). Give either `images` or `image_embeds`.
    image_embeds (`numpy.ndarray` or `torch.Tensor`, optional): (N, D) precomputed image embeddings.
    model (`str` or `tuple`): CLIP backbone, a Hub id or a local transformers folder, or a loaded model and
        its processor, `(model, processor)`. Defaults to "openai/clip-vit-base-patch32".
    prefix (`str`): prompt joined before every caption and reference. None (default) is the model
        family's: "A photo depicts" for English models, "" for multilingual and Chinese ones (AltCLIP,
        Chinese-CLIP, MetaCLIP 2).
    w (`float`): rescaling weight of CLIP-S. Defaults to 2.5.
    clip_reference_cosine (`bool`): clip the best-reference cosine at 0 (the paper's formula).
        Defaults to False (the authors' code).
    batch_size (`int`): encoder batch size. Defaults to 64.
    device (`str`): "cpu", "cuda", ...; None picks the first GPU if any, else the CPU.
    dtype (`str`): "float32" (default), "float16" or "bfloat16".
    Every option can also be given when loading, `evaluate.load("metrics/refclipscore", model=...)`, and is then used
    by every `compute` (an option given to `compute` wins); the inputs of the other capeval modules
    (`references`, `images`, `videos`, ...) are accepted and ignored, so `evaluate.combine` works.
Returns:
    refclipscore (`float`): mean RefCLIP-S.
    scores (`list` of `float`): RefCLIP-S of each prediction.
    clip_s (`float`): mean CLIP-S of the same predictions (not named `clipscore`, which is the clipscore
        module's key in `evaluate.combine`).
    clip_s_scores (`list` of `float`): CLIP-S of each prediction.
    signature (`str`): model, revision and every option that changes the numbers, with library versions.
Examples:
    >>> import evaluate
    >>> from capeval.shapes import Scene, draw, shapes_clip_path
    >>> refclipscore = evaluate.load("metrics/refclipscore")
    >>> image = draw(Scene("green", "triangle", "top"))
    >>> results = refclipscore.compute(
    ...     predictions=["a green triangle at the top", "a yellow circle at the bottom"],
    ...     references=[["a green triangle at the top"], ["a green triangle at the top"]],
    ...     images=[image, image],
    ...     model=str(shapes_clip_path()),
    ... )
    >>> results["scores"][0] > results["scores"][1]
    True
    >>> sorted(results)
    ['clip_s', 'clip_s_scores', 'refclipscore', 'scores', 'signature']

    Images stream with their captions and references, options set when loading:

    >>> refclipscore = evaluate.load("metrics/refclipscore", model=str(shapes_clip_path()))
    >>> refclipscore.add_batch(
    ...     predictions=["a green triangle at the top", "a yellow circle at the bottom"],
    ...     references=[["a green triangle at the top"], ["a green triangle at the top"]],
    ...     images=[image, image],
    ... )
    >>> refclipscore.compute()["scores"] == results["scores"]
    True
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Refclipscore(capeval.GuardedMetric, evaluate.Metric):
    # evaluate names a module after its class: "refclipscore", its folder's name, in evaluate.combine's keys.
    # The declaration of the metric (capeval.registry) sets what the module reads and stores: references,
    # images or videos (stored unchanged by capeval), and how messages name it.
    metric = "refclipscore"

    def _info(self):
        return self.declared_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            homepage="https://github.com/jmhessel/clipscore",
            codebase_urls=["https://github.com/jmhessel/clipscore"],
            reference_urls=["https://arxiv.org/abs/2104.08718"],
        )

    def _compute(
        self,
        predictions,
        references,
        images=None,
        image_embeds=None,
        videos=None,
        video_embeds=None,
        model=capeval.DEFAULT_MODEL,
        prefix=None,
        w=capeval.W_CLIP_S,
        clip_reference_cosine=False,
        batch_size=capeval.BATCH_SIZE,
        device=None,
        dtype="float32",
    ):
        # videos belong to emscore in an evaluate.combine: accepted, unused.
        images = self._media_for_scorer(images, image_embeds)
        scorer = capeval.RefCLIPScore(
            model=model,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            prefix=prefix,
            w=w,
            clip_reference_cosine=clip_reference_cosine,
        )
        return scorer(predictions, references=references, images=images, image_embeds=image_embeds)
