"""EMScore: video-caption evaluation by coarse and fine-grained embedding matching (Shi et al., CVPR 2022).

The maths lives in the capeval package (capeval.EMScore); this module declares the inputs and passes the
options through. References are optional: omit them (or give empty lists) to score against videos only.
"""

import evaluate

import capeval

_CITATION = """\
@inproceedings{shi2022emscore,
  title     = {{EMScore}: Evaluating Video Captioning via Coarse-Grained and Fine-Grained Embedding Matching},
  author    = {Shi, Yaya and Yang, Xu and Xu, Haiyang and Yuan, Chunfeng and Li, Bing and Hu, Weiming and Zha, Zheng-Jun},
  booktitle = {Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)},
  pages     = {17929--17938},
  year      = {2022},
}
"""

_DESCRIPTION = """\
EMScore rates a video caption against the video's frames (reference-free, EMScore(X,V)), against reference
captions (EMScore(X,X*)), or both (EMScore(X,V,X*)). It averages a coarse-grained match (cosine of the CLIP
caption embedding and the mean frame embedding, or the reference's embedding) with a fine-grained one
(greedy matching of IDF-weighted CLIP token embeddings against frames or reference tokens, as precision,
recall and F). The headline value is full_F of the variant the inputs allow, averaged over captions. It
follows the authors' released code; with `checkpoint=` the PAC-S weights replace CLIP's.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per video.
    references (`list` of `list` of `str`, optional): reference captions per prediction. Omit them, or give an
        empty list for every prediction, to score against the videos only.
    videos (`list`, optional): one video per prediction: a file path PyAV can decode, a list of frames (PIL
        images, arrays, tensors or image paths), or a (T, H, W, C) array. An input like `predictions`:
        `add_batch` and `add` take them too (a path is stored as the path; in-memory frames are stored one by
        one, losslessly, as images are); give `videos=None` to `evaluate.combine`'s `add_batch` without videos.
    video_embeds (`list`, optional): instead of `videos`, per prediction a (K, D) array of frame embeddings of
        the same model (sampled by `num_frames` and L2-normalised here).
    model (`str` or `tuple`): CLIP backbone, a Hub id or a local transformers folder, or a loaded model and
        its processor, `(model, processor)`. Defaults to "openai/clip-vit-base-patch32", the authors' ViT-B/32
        (with `checkpoint`: the model it was tuned from).
    checkpoint (`str`, optional): PAC-S weights (the authors' .pth, a converted folder, a Hub repo or file)
        used instead of CLIP's: the PAC-S authors' video metric.
    num_frames (`int`, optional): frames per video, evenly spaced (np.linspace); None (default) = every frame,
        as the authors' library. Their VATEX-EVAL protocol uses 10.
    idf (`bool`, `list` of `str` or `dict`): True (default) = IDF weights from the references of this call,
        else from its candidates; False = uniform weights; a list of captions = IDF from that corpus; a dict
        token id -> weight used as given.
    batch_size (`int`): encoder batch size, halved automatically on GPU out-of-memory. Defaults to 64.
    device (`str`): "cpu", "cuda", "cuda:1", ...; None picks the first GPU if any, else the CPU.
    dtype (`str`): "float32" (default), "float16" or "bfloat16".
    batch_padding (`str`): "exclude" (default): padded frames and tokens never enter a maximum, so a score
        does not depend on its batch; "authors": the authors' batches of `batch_size` pairs in input order,
        padding counted as cosine 0, to reproduce their numbers exactly (recorded in the signature).
    Every option can also be given when loading, `evaluate.load("metrics/emscore", model=...)`, and is then used
    by every `compute` (an option given to `compute` wins); the inputs of the other capeval modules
    (`references`, `images`, `videos`, ...) are accepted and ignored, so `evaluate.combine` works.
Returns:
    emscore (`float`): mean full_F of the variant computed (EMScore(X,V,X*) when videos and references are
        both given).
    scores (`list` of `float`): full_F of each prediction, in input order.
    variant (`str`): "EMScore(X,V)", "EMScore(X,X*)" or "EMScore(X,V,X*)".
    details (`dict`): for each variant computed, per-prediction lists figr_P, figr_R, figr_F (fine-grained),
        cogr (coarse-grained) and full_P, full_R, full_F (their means).
    signature (`str`): model, revision and every option that changes the numbers, with library versions.
Examples:
    The committed shapes CLIP (a tiny CLIP trained on drawn shapes) runs offline; a list of frames is a video:

    >>> import evaluate
    >>> from capeval.shapes import Scene, draw_frames, shapes_clip_path
    >>> emscore = evaluate.load("metrics/emscore")  # or capeval.load("emscore") after pip install
    >>> clip = draw_frames(Scene("red", "circle", "left"), n_frames=6)
    >>> results = emscore.compute(
    ...     predictions=["a red circle on the left", "a blue square on the right"],
    ...     videos=[clip, clip],
    ...     model=str(shapes_clip_path()),
    ... )
    >>> results["variant"], results["scores"][0] > results["scores"][1]
    ('EMScore(X,V)', True)
    >>> results = emscore.compute(
    ...     predictions=["a red circle on the left", "a blue square on the right"],
    ...     references=[["a red circle at the left"], ["a red circle on the left side"]],
    ...     videos=[clip, clip],
    ...     model=str(shapes_clip_path()),
    ... )
    >>> results["variant"], sorted(results["details"])
    ('EMScore(X,V,X*)', ['EMScore(X,V)', 'EMScore(X,V,X*)', 'EMScore(X,X*)'])

    Videos stream with their captions, options set when loading:

    >>> emscore = evaluate.load("metrics/emscore", model=str(shapes_clip_path()))
    >>> emscore.add_batch(predictions=["a red circle on the left"], videos=[clip])
    >>> emscore.add(prediction="a blue square on the right", videos=clip)
    >>> emscore.compute()["variant"]
    'EMScore(X,V)'
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Emscore(capeval.GuardedMetric, evaluate.Metric):
    # evaluate names a module after its class: "emscore", its folder's name, in evaluate.combine's keys.
    # The declaration of the metric (capeval.registry) sets what the module reads and stores: references,
    # images or videos (stored unchanged by capeval), and how messages name it.
    metric = "emscore"

    def _info(self):
        return self.declared_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            homepage="https://github.com/ShiYaya/emscore",
            codebase_urls=["https://github.com/ShiYaya/emscore"],
            reference_urls=["https://arxiv.org/abs/2111.08919"],
        )

    def _compute(
        self,
        predictions,
        references=None,
        videos=None,
        video_embeds=None,
        images=None,
        image_embeds=None,
        model=None,
        checkpoint=None,
        num_frames=capeval.NUM_FRAMES,
        idf=True,
        batch_size=capeval.BATCH_SIZE,
        device=None,
        dtype="float32",
        batch_padding="exclude",
    ):
        # images belong to the image modules of an evaluate.combine: accepted, unused.
        videos = self._media_for_scorer(videos, video_embeds)
        scorer = capeval.EMScore(
            model=model,
            checkpoint=checkpoint,
            num_frames=num_frames,
            idf=idf,
            batch_size=batch_size,
            device=device,
            dtype=dtype,
            batch_padding=batch_padding,
        )
        return scorer(predictions, references=references, videos=videos, video_embeds=video_embeds)
