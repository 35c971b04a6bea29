"""WMD: Word Mover's Distance similarity of captions to references (Kusner et al. 2015; Kilickaya et al. 2017).

The maths lives in the capeval package (capeval.WMD); this module declares the inputs and passes the
options through.
"""

import evaluate

import capeval

_CITATION = """\
@inproceedings{kusner2015wmd,
  title     = {From Word Embeddings To Document Distances},
  author    = {Kusner, Matt J. and Sun, Yu and Kolkin, Nicholas I. and Weinberger, Kilian Q.},
  booktitle = {Proceedings of the 32nd International Conference on Machine Learning},
  pages     = {957--966},
  year      = {2015},
}
@inproceedings{kilickaya2017reevaluating,
  title     = {Re-evaluating Automatic Metrics for Image Captioning},
  author    = {Kilickaya, Mert and Erdem, Aykut and Ikizler-Cinbis, Nazli and Erdem, Erkut},
  booktitle = {Proceedings of the 15th Conference of the European Chapter of the Association for Computational Linguistics},
  pages     = {199--209},
  year      = {2017},
}
"""

_DESCRIPTION = """\
WMD measures how far the words of a caption have to "travel" in a word-embedding space to become the words
of a reference: the optimal transport cost between the two normalised bags of words with Euclidean costs
between word vectors. Following the COCO caption toolkit (pycocoevalcap/wmd), captions are PTB-tokenised,
lower-cased, stripped of punctuation and stopwords, each reference gives the similarity exp(-WMD / sigma)
(sigma = 1), a candidate keeps its best reference, and the corpus score is the mean. The default vectors are
GloVe 6B 50d (offline); the toolkit used GoogleNews word2vec (vectors="fse/word2vec-google-news-300").
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions.
    references (`list` of `list` of `str`): one or more reference captions per prediction.
    vectors (`str`): word vectors: None or "glove-6b-50d" (the packaged GloVe 6B 50d, offline), a local
        file (word2vec text/binary, GloVe text, fastText .vec/.bin, gensim KeyedVectors), or a Hugging
        Face Hub repo or file such as "fse/word2vec-google-news-300" (the vectors of the COCO toolkit).
    sigma (`float`): score = exp(-WMD / sigma). Defaults to 1.0.
    normalize_vectors (`bool`): unit-length word vectors (gensim 4's default). Defaults to False: raw
        vectors, as gensim 3 computed WMD for the toolkit.
    stopwords (`str` or `list` of `str`): "coco" (the toolkit's list, default), "none", or your own words.
    num_workers (`int`): processes for the transport problems; None uses them only for large problems.
    Every option can also be given when loading, `evaluate.load("metrics/wmd", vectors=...)`, and is then used
    by every `compute` (an option given to `compute` wins); the inputs of the other capeval modules
    (`references`, `images`, `videos`, ...) are accepted and ignored, so `evaluate.combine` works.
Returns:
    wmd (`float`): mean score over the predictions.
    scores (`list` of `float`): exp(-WMD / sigma) with the best reference, per prediction, in [0, 1].
    distances (`list` of `float`): the WMD to that reference (inf, with score 0, when the prediction or
        all of its references have no in-vocabulary word left).
    signature (`str`): vectors, options and library versions.
Examples:
    >>> import evaluate
    >>> wmd = evaluate.load("metrics/wmd")  # or capeval.load("wmd") after pip install
    >>> results = wmd.compute(
    ...     predictions=["A dog runs on the grass.", "A man rides a bike."],
    ...     references=[["A dog is running on grass.", "A puppy plays outside."], ["A cat sleeps on a sofa."]],
    ... )
    >>> # The packaged GloVe-6B-50d values; tests/test_wmd.py checks this computation against gensim's
    >>> # wmdistance on the same tokens.
    >>> [round(s, 3) for s in results["scores"]]
    [0.336, 0.007]
    >>> results["scores"][0] > results["scores"][1]
    True
    >>> sorted(results)
    ['distances', 'scores', 'signature', 'wmd']
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Wmd(capeval.GuardedMetric, evaluate.Metric):
    # evaluate names a module after its class: "wmd", its folder's name, in evaluate.combine's keys.
    # The declaration of the metric (capeval.registry) sets what the module reads and stores: references,
    # images or videos (stored unchanged by capeval), and how messages name it.
    metric = "wmd"

    def _info(self):
        return self.declared_info(
            _DESCRIPTION,
            _CITATION,
            _KWARGS_DESCRIPTION,
            homepage="https://github.com/tylin/coco-caption",
            codebase_urls=["https://github.com/tylin/coco-caption/blob/master/pycocoevalcap/wmd/wmd.py"],
            reference_urls=[
                "https://aclanthology.org/E17-1019",
                "https://proceedings.mlr.press/v37/kusnerb15.html",
            ],
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
        sigma=capeval.WMD_SIGMA,
        normalize_vectors=False,
        stopwords="coco",
        num_workers=None,
    ):
        # images and videos belong to the image and video modules of an evaluate.combine: accepted, unused.
        scorer = capeval.WMD(
            vectors=vectors,
            sigma=sigma,
            normalize_vectors=normalize_vectors,
            stopwords=stopwords,
            num_workers=num_workers,
        )
        return scorer(predictions, references)
