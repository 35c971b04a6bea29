"""CLIPScore: reference-free image-caption compatibility (Hessel et al., EMNLP 2021), as an evaluate module.

The maths lives in the capeval package (capeval.CLIPScore); this module declares the inputs and passes
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
CLIPScore rates how well a caption fits an image without reference captions: the cosine similarity of
CLIP's image embedding and the embedding of "A photo depicts <caption>", clipped at 0 and rescaled,
CLIP-S(c, v) = w * max(cos(E_c, E_v), 0) with w = 2.5. The corpus score is the mean over captions.
It follows the authors' released code (prompt, w, per-caption clipping, OpenAI image preprocessing).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one image per prediction: PIL images, file paths, numpy arrays (H, W, C),
        torch tensors (C, H, W) or `datasets` Image dicts. An input like `predictions`: `add_batch` and
        `add` take them too, and they pass evaluate's cache unchanged (paths as paths, in-memory images
        encoded losslessly, read back by capeval). Give either `images` or `image_embeds`.
    image_embeds (`numpy.ndarray` or `torch.Tensor`, optional): (N, D) precomputed image embeddings
        of the same model (they are L2-normalised here).
    model (`str` or `tuple`): CLIP backbone, a Hub id or a local transformers folder. Defaults to
        "openai/clip-vit-base-patch32", the model of the paper. SigLIP, ALIGN, Chinese-CLIP, AltCLIP and
        MetaCLIP 2 checkpoints are scored with their own conventions (README: "Model families"). A loaded model
        and its processor, `(model, processor)`, is scored as it is at each call, its weights hashed into the
        signature (README: "The model you are training").
    prefix (`str`): prompt joined before every caption. None (default) is the model family's: "A photo depicts"
        for English models, "" for multilingual and Chinese ones (AltCLIP, Chinese-CLIP, MetaCLIP 2).
    w (`float`): rescaling weight. Defaults to 2.5.
    batch_size (`int`): encoder batch size, halved automatically on GPU out-of-memory. Defaults to 64.
    device (`str`): "cpu", "cuda", "cuda:1", ...; None picks the first GPU if any, else the CPU.
    dtype (`str`): "float32" (default), "float16" or "bfloat16".
    Every option can also be given when loading, `evaluate.load("metrics/clipscore", model=...)`, and is then used
    by every `compute` (an option given to `compute` wins); the inputs of the other capeval modules
    (`references`, `images`, `videos`, ...) are accepted and ignored, so `evaluate.combine` works.
Returns:
    clipscore (`float`): mean CLIP-S over the predictions.
    scores (`list` of `float`): CLIP-S of each prediction, in input order.
    signature (`str`): model, revision and every option that changes the numbers, with library versions.
Examples:
    The committed shapes CLIP (a tiny CLIP trained on drawn shapes) runs offline:

    >>> import evaluate
    >>> from capeval.shapes import Scene, draw, shapes_clip_path
    >>> clipscore = evaluate.load("metrics/clipscore")  # or capeval.load("clipscore") after pip install
    >>> image = draw(Scene("red", "circle", "left"))
    >>> results = clipscore.compute(
    ...     predictions=["a red circle on the left", "a blue square on the right"],
    ...     images=[image, image],
    ...     model=str(shapes_clip_path()),
    ... )
    >>> results["scores"][0] > results["scores"][1]
    True
    >>> sorted(results)
    ['clipscore', 'scores', 'signature']

    Images stream with their captions (an evaluation loop keeps none of them), options set when loading:

    >>> clipscore = evaluate.load("metrics/clipscore", model=str(shapes_clip_path()))
    >>> clipscore.add_batch(predictions=["a red circle on the left"], images=[image])
    >>> clipscore.add(prediction="a blue square on the right", images=image)
    >>> clipscore.compute()["scores"] == results["scores"]
    True
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Clipscore(capeval.GuardedMetric, evaluate.Metric):
    # evaluate names a module after its class: "clipscore", its folder's name, in evaluate.combine's keys.
    # The declaration of the metric (capeval.registry) sets what the module reads and stores: references,
    # images or videos (stored unchanged by capeval), and how messages name it.
    metric = "clipscore"

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
        images=None,
        image_embeds=None,
        references=None,
        videos=None,
        video_embeds=None,
        model=capeval.DEFAULT_MODEL,
        prefix=None,
        w=capeval.W_CLIP_S,
        batch_size=capeval.BATCH_SIZE,
        device=None,
        dtype="float32",
    ):
        # references and videos belong to other modules of an evaluate.combine: accepted, unused.
        images = self._media_for_scorer(images, image_embeds)
        scorer = capeval.CLIPScore(
            model=model, device=device, dtype=dtype, batch_size=batch_size, prefix=prefix, w=w
        )
        return scorer(predictions, images=images, image_embeds=image_embeds)
