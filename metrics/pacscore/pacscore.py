"""PAC-S and RefPAC-S: positive-augmented contrastive caption scores (Sarto et al., CVPR 2023), as an evaluate module.

The maths lives in the capeval package (capeval.PACScore); this module declares the inputs and passes
the options through. References are optional: without them the module returns PAC-S, with them RefPAC-S too.
"""

import evaluate

import capeval

_CITATION = """\
@inproceedings{sarto2023positive,
  title     = {{Positive-Augmented Contrastive Learning for Image and Video Captioning Evaluation}},
  author    = {Sarto, Sara and Barraco, Manuele and Cornia, Marcella and Baraldi, Lorenzo and Cucchiara, Rita},
  booktitle = {Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition},
  year      = {2023},
}
"""

_DESCRIPTION = """\
PAC-S scores a caption against its image with a CLIP whose final visual and textual projections were
fine-tuned by positive-augmented contrastive learning (real image-caption pairs plus generated images and
captions as extra positives). It is computed like CLIP-S: PAC-S(c, v) = w * max(cos(E_c, E_v), 0) with
w = 2.0 and the prompt "A photo depicts". With references, RefPAC-S is the harmonic mean of PAC-S and the
best cosine between the caption and its references (references get the prompt too; that cosine is neither
clipped nor rescaled, as in the authors' code). The weights are the authors' checkpoint (checkpoint=).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    references (`list` of `list` of `str`, optional): reference captions of each prediction. When given,
        RefPAC-S is returned as well.
    images (`list`): one image per prediction: PIL images, file paths, numpy arrays (H, W, C),
        torch tensors (C, H, W) or `datasets` Image dicts. An input like `predictions`: `add_batch` and
        `add` take them too, and they pass evaluate's cache unchanged (paths as paths, in-memory images
        encoded losslessly, read back by capeval). Give either `images` or `image_embeds`.
    image_embeds (`numpy.ndarray` or `torch.Tensor`, optional): (N, D) precomputed image embeddings
        of the same PAC-S model.
    checkpoint (`str`): the PAC-S weights (required): the authors' .pth file (clip_ViT-B-32.pth,
        openClip_ViT-L-14.pth), a folder converted by scripts/convert_pacscore.py, a Hub repo holding one
        ("org/name"), or a file in a Hub repo ("org/name/clip_ViT-B-32.pth").
    model (`str`, optional): the CLIP the .pth weights go into. None picks the base the published
        checkpoint of that architecture was trained from ("openai/clip-vit-base-patch32" for ViT-B/32,
        "laion/CLIP-ViT-L-14-laion2B-s32B-b82K" for ViT-L/14); a converted folder is a whole model already.
    prefix (`str`): prompt joined before every caption and reference. Defaults to "A photo depicts".
    w (`float`): rescaling weight. Defaults to 2.0.
    clip_reference_cosine (`bool`): clip RefPAC-S's best-reference cosine at 0 (eq. 5-6 of Sarto et al.);
        False (default) keeps it unclipped, as the authors' code does.
    batch_size (`int`): encoder batch size, halved automatically on GPU out-of-memory. Defaults to 64.
    device (`str`): "cpu", "cuda", "cuda:1", ...; None picks the first GPU if any, else the CPU.
    dtype (`str`): "float32" (default), "float16" or "bfloat16".
    Every option can also be given when loading, `evaluate.load("metrics/pacscore", checkpoint=...)`, and is then used
    by every `compute` (an option given to `compute` wins); the inputs of the other capeval modules
    (`references`, `images`, `videos`, ...) are accepted and ignored, so `evaluate.combine` works.
Returns:
    pacscore (`float`): mean PAC-S over the predictions.
    scores (`list` of `float`): PAC-S of each prediction, in input order.
    refpacscore (`float`): mean RefPAC-S (only with references).
    refpacscore_scores (`list` of `float`): RefPAC-S of each prediction (only with references).
    signature (`str`): model, checkpoint (with the sha256 prefix of its weights) and every option that
        changes the numbers, with library versions.
Examples:
    Any converted PAC-S folder is a complete transformers CLIP; offline, the committed shapes CLIP (a tiny
    CLIP trained on drawn shapes) stands in for one:

    >>> import evaluate
    >>> from capeval.shapes import Scene, draw, shapes_clip_path
    >>> pacscore = evaluate.load("metrics/pacscore")  # or capeval.load("pacscore") after pip install
    >>> image = draw(Scene("red", "circle", "left"))
    >>> results = pacscore.compute(
    ...     predictions=["a red circle on the left", "a blue square on the right"],
    ...     images=[image, image],
    ...     checkpoint=str(shapes_clip_path()),
    ... )
    >>> results["scores"][0] > results["scores"][1]
    True
    >>> sorted(results)
    ['pacscore', 'scores', 'signature']
    >>> results = pacscore.compute(
    ...     predictions=["a red circle on the left", "a blue square on the right"],
    ...     references=[["a red circle at the left"], ["a red circle at the left"]],
    ...     images=[image, image],
    ...     checkpoint=str(shapes_clip_path()),
    ... )
    >>> results["refpacscore_scores"][0] > results["refpacscore_scores"][1]
    True
    >>> sorted(results)
    ['pacscore', 'refpacscore', 'refpacscore_scores', 'scores', 'signature']

    Images stream with their captions, the checkpoint set when loading:

    >>> pacscore = evaluate.load("metrics/pacscore", checkpoint=str(shapes_clip_path()))
    >>> pacscore.add_batch(predictions=["a red circle on the left"], images=[image])
    >>> pacscore.add_batch(predictions=["a blue square on the right"], images=[image])
    >>> sorted(pacscore.compute())
    ['pacscore', 'scores', 'signature']
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Pacscore(capeval.GuardedMetric, evaluate.Metric):
    # evaluate names a module after its class: "pacscore", its folder's name, in evaluate.combine's keys.
    # The declaration of the metric (capeval.registry) sets what the module reads and stores: references,
    # images or videos (stored unchanged by capeval), and how messages name it.
    metric = "pacscore"

    def _info(self):
        return self.declared_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            homepage="https://github.com/aimagelab/pacscore",
            codebase_urls=["https://github.com/aimagelab/pacscore"],
            reference_urls=["https://arxiv.org/abs/2303.12112"],
        )

    def _compute(
        self,
        predictions,
        references,
        images=None,
        image_embeds=None,
        videos=None,
        video_embeds=None,
        checkpoint=None,
        model=None,
        prefix=capeval.PREFIX,
        w=capeval.W_PAC_S,
        batch_size=capeval.BATCH_SIZE,
        device=None,
        dtype="float32",
        clip_reference_cosine=False,
    ):
        # videos belong to emscore in an evaluate.combine: accepted, unused.
        images = self._media_for_scorer(images, image_embeds)
        scorer = capeval.PACScore(
            checkpoint=checkpoint,
            model=model,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            prefix=prefix,
            w=w,
            clip_reference_cosine=clip_reference_cosine,
        )
        if all(len(refs) == 0 for refs in references):
            references = None
        return scorer(predictions, references=references, images=images, image_embeds=image_embeds)
