"""WEmbSim: cosine similarity of mean word embeddings, caption vs references (Sharif et al., DICTA 2020).

The maths lives in the capeval package (capeval.WEmbSim); this module declares the inputs and passes the
options through.
"""

import evaluate

import capeval

_CITATION = """\
@inproceedings{sharif2020wembsim,
  title     = {{WEmbSim}: A Simple yet Effective Metric for Image Captioning},
  author    = {Sharif, Naeha and White, Lyndon and Bennamoun, Mohammed and Liu, Wei and Shah, Syed Afaq Ali},
  booktitle = {2020 Digital Image Computing: Techniques and Applications (DICTA)},
  year      = {2020},
}
"""

_DESCRIPTION = """\
WEmbSim represents a caption by the mean of its word embeddings (MOWE) after removing stopwords and
out-of-vocabulary words, and scores a candidate by the cosine similarity of its MOWE with each reference's,
averaged over the references (max or min on request). The corpus score is the mean over candidates. The
default vectors are GloVe 6B 50d (offline); fastText, word2vec and other GloVe files load the same way.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions.
    references (`list` of `list` of `str`): one or more reference captions per prediction.
    vectors (`str`): word vectors: None or "glove-6b-50d" (the packaged GloVe 6B 50d, offline), a local
        file (word2vec text/binary, GloVe text, fastText .vec/.bin, gensim KeyedVectors), or a Hugging
        Face Hub repo or file such as "fse/fasttext-wiki-news-subwords-300".
    reduction (`str`): how the cosines with the references combine: "mean" (the paper, default), "max"
        or "min".
    stopwords (`str` or `list` of `str`): "coco" (NLTK's English list as the COCO toolkit ships it,
        default), "none", or your own words.
    normalize_vectors (`bool`): average unit-length word vectors. Defaults to False (raw vectors).
    absolute_cosine (`bool`): |cos| of the mean vectors, as eq. 2 of Sharif et al. (default); False keeps the
        signed cosine (recorded in the signature).
    Every option can also be given when loading, `evaluate.load("metrics/wembsim", vectors=...)`, and is then used
    by every `compute` (an option given to `compute` wins); the inputs of the other capeval modules
    (`references`, `images`, `videos`, ...) are accepted and ignored, so `evaluate.combine` works.
Returns:
    wembsim (`float`): mean score over the predictions.
    scores (`list` of `float`): per prediction, the combined cosine in [0, 1] ([-1, 1] with absolute_cosine=False).
    reference_scores (`list` of `list`): per prediction, the cosine with each reference (None for a
        reference without in-vocabulary words, which is left out).
    signature (`str`): vectors, options and library versions.
Examples:
    >>> import evaluate
    >>> wembsim = evaluate.load("metrics/wembsim")  # or capeval.load("wembsim") after pip install
    >>> results = wembsim.compute(
    ...     predictions=["A dog runs on the grass.", "A man rides a bike."],
    ...     references=[["A dog is running on grass.", "A puppy plays outside."], ["A cat sleeps on a sofa."]],
    ... )
    >>> # The packaged GloVe-6B-50d values; tests/test_wembsim.py checks this computation against gensim's
    >>> # n_similarity on the same tokens.
    >>> [round(s, 3) for s in results["scores"]]
    [0.879, 0.575]
    >>> sorted(results)
    ['reference_scores', 'scores', 'signature', 'wembsim']
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Wembsim(capeval.GuardedMetric, evaluate.Metric):
    # evaluate names a module after its class: "wembsim", its folder's name, in evaluate.combine's keys.
    # The declaration of the metric (capeval.registry) sets what the module reads and stores: references,
    # images or videos (stored unchanged by capeval), and how messages name it.
    metric = "wembsim"

    def _info(self):
        return self.declared_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            homepage="https://arxiv.org/abs/2012.13137",
            reference_urls=["https://arxiv.org/abs/2012.13137"],
        )

    def _compute(
        self,
        predictions,
        references,
        images=None,
        image_embeds=None,
        videos=None,
        video_embeds=None,
        vectors=None,
        reduction=capeval.WEMBSIM_REDUCTION,
        stopwords="coco",
        normalize_vectors=False,
        absolute_cosine=capeval.WEMBSIM_ABSOLUTE_COSINE,
    ):
        # images and videos belong to the image and video modules of an evaluate.combine: accepted, unused.
        scorer = capeval.WEmbSim(
            vectors=vectors,
            reduction=reduction,
            stopwords=stopwords,
            normalize_vectors=normalize_vectors,
            absolute_cosine=absolute_cosine,
        )
        return scorer(predictions, references)
