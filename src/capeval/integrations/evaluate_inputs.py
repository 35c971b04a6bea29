"""What capeval's evaluate modules do before evaluate stores their inputs, and one call at a time per module.

evaluate writes ``predictions`` and ``references`` to an Arrow table before a module's ``_compute`` runs, and
that path changes bad input instead of refusing it: a bare string is stored character by character
(``compute(predictions="dog")`` scores "d", "o" and "g"), only the first item's type is checked (a number
further down becomes the caption "3"), and missing references fail with ``'NoneType' object has no len()``.
``GuardedMetric`` checks every item first, with errors naming the argument and the index.

A module object also keeps the state of the call in progress (its Arrow writer and buffer, its cache file and
file lock): two threads in ``compute`` at once tear it down under each other, and every later call fails.
``GuardedMetric`` serialises ``compute``, ``add_batch`` and ``add`` on one object with a lock: concurrent calls
wait their turn and each gets the result a lone call gets. (Streaming with ``add_batch`` from several threads
into one object still mixes their items into one stream, as evaluate defines it: give each stream its own
module object.)

Inputs and options follow evaluate's own contracts, so ``evaluate.combine`` of image and text metrics works:
images and videos are declared inputs (stored unchanged: ``capeval.integrations.evaluate_storage``), every module
accepts every module's inputs (``INPUTS``) and ignores those it does not use, and options given to
``evaluate.load(path, model=...)`` are kept by the module and used under those given to ``compute``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading

from capeval.integrations.evaluate_storage import read_stored_video, stored_image, stored_video
from capeval.validation import (
    OPTION_RULE_NAMES,
    check_options,
    check_predictions,
    check_reference_list,
    check_references,
    check_same_length,
    has_visible_text,
)

REFERENCES = ("required", "optional", "ignored")
MEDIA = ("images", "videos")

# The inputs of every capeval module, which every module accepts (and ignores where unused): evaluate.combine
# gives each module every keyword of compute().
INPUTS = ("predictions", "references", "images", "image_embeds", "videos", "video_embeds")
_EMBEDS = {"images": "image_embeds", "videos": "video_embeds"}
_STORE = {"images": stored_image, "videos": stored_video}
_READ = {"images": lambda item: item, "videos": read_stored_video}
# What evaluate.load passes to every module's constructor (EvaluationModule.__init__'s own parameters).
_EVALUATE_INIT = frozenset(
    {
        "config_name",
        "keep_in_memory",
        "cache_dir",
        "num_process",
        "process_id",
        "seed",
        "experiment_id",
        "hash",
        "max_concurrent_cache_files",
        "timeout",
    }
)


def _as_list(values):
    # evaluate takes numpy arrays and pandas series as well as lists; a 0-d array's tolist() is one string,
    # which the checks then refuse as such.
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        return values.tolist()
    return values


class GuardedMetric:
    """Mixin before ``evaluate.Metric`` in capeval's modules: ``class Clipscore(capeval.GuardedMetric, evaluate.Metric)``.

    Attributes:
        metric: the metric's name (``capeval.registry``); its declaration sets the three attributes below.
        references_input: ``"required"`` (refclipscore, wmd, wembsim); ``"optional"`` (pacscore, emscore:
            omitted, or an empty list for every prediction, means none); ``"ignored"`` (clipscore declares no
            references: evaluate drops them, so a text metric's references can pass through
            ``evaluate.combine``).
        media_input: the declared input stored losslessly, ``"images"`` (a ``datasets.Image(decode=False)``
            feature) or ``"videos"`` (``capeval.integrations.evaluate_storage.VIDEO_FEATURE``); ``None`` for the
            text metrics. Optional per row: precomputed embeddings given to ``compute`` stand in for it.
        metric_label: the readable name in messages (``"RefCLIPScore"``); ``evaluate`` names the module after
            its class (``refclipscore``), which is its folder's name.
    """

    metric: str | None = None
    references_input = "ignored"
    media_input: str | None = None
    metric_label: str | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        # A module names its metric; what it reads and how it is called come from the metric's declaration.
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("metric") is None:
            return
        from capeval.registry import spec

        declared = spec(cls.metric)
        cls.references_input = {"required": "required", "optional": "optional", "none": "ignored"}[
            declared.references
        ]
        cls.media_input = declared.media
        cls.metric_label = declared.label

    def declared_info(self, description: str, citation: str, inputs_description: str, **urls):
        """The module's ``evaluate.MetricInfo``: its texts and links, its features from the declaration.

        Args:
            description, citation, inputs_description: the script's ``_DESCRIPTION``, ``_CITATION`` and
                ``_KWARGS_DESCRIPTION``.
            **urls: ``homepage``, ``codebase_urls``, ``reference_urls``.
        """
        import datasets
        import evaluate

        return evaluate.MetricInfo(
            module_type="metric",
            description=description,
            citation=citation,
            inputs_description=inputs_description,
            features=datasets.Features(self.declared_features()),
            **urls,
        )

    @classmethod
    def declared_features(cls) -> dict:
        """The module's ``datasets`` features, from its metric's declaration: ``predictions``, ``references``
        where the metric reads them, and its images (undecoded ``datasets.Image``) or videos (paths)."""
        import datasets

        from capeval.integrations.evaluate_storage import VIDEO_FEATURE

        features: dict = {"predictions": datasets.Value("string")}
        if cls.references_input != "ignored":
            features["references"] = datasets.Sequence(datasets.Value("string"))
        if cls.media_input == "images":
            features["images"] = datasets.Image(decode=False)
        elif cls.media_input == "videos":
            features["videos"] = VIDEO_FEATURE
        return features

    def __init__(self, *args, **kwargs) -> None:
        if self.references_input not in REFERENCES:
            raise ValueError(f"references_input must be one of {REFERENCES}, got {self.references_input!r}")
        if self.media_input not in (None, *MEDIA):
            raise ValueError(f"media_input must be None or one of {MEDIA}, got {self.media_input!r}")
        # evaluate.load(path, **init_kwargs) hands its extra keywords to the constructor, and evaluate's own
        # constructor swallows unknown ones: take the module's options here, and refuse anything else by name.
        options = {name: kwargs.pop(name) for name in list(kwargs) if name in self.option_names()}
        unknown = sorted(set(kwargs) - _EVALUATE_INIT)
        if unknown:
            raise TypeError(
                f"{self._metric_label()} does not take {unknown} when loading; its options are "
                f"{list(self.option_names())}"
            )
        shared = {name: value for name, value in options.items() if name in OPTION_RULE_NAMES}
        self._load_options = {**options, **check_options(**shared)}
        super().__init__(*args, **kwargs)
        self._call_lock = threading.RLock()

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The options of this module: the keywords of its ``_compute`` that are not inputs."""
        params = inspect.signature(cls._compute).parameters
        return tuple(name for name in params if name != "self" and name not in INPUTS)

    @property
    def load_options(self) -> dict:
        """The options given when loading (``evaluate.load(path, model=...)``), used under those of ``compute``."""
        return dict(self._load_options)

    # A lock does not pickle: a copied or unpickled module gets a fresh one (evaluate keeps modules picklable).
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_call_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._call_lock = threading.RLock()

    def _metric_label(self) -> str:
        return self.metric_label or type(self).__name__

    def _refuse_foreign_options(self, kwargs: dict) -> None:
        foreign = sorted(set(kwargs) - set(INPUTS) - set(self.option_names()))
        if foreign:
            raise TypeError(
                f"{self._metric_label()} ({self.name}) has no option {foreign}; its options are "
                f"{list(self.option_names())}. evaluate.combine gives every module every keyword of compute(): "
                f"give an option only some modules take when loading them, "
                f"evaluate.load(path, {foreign[0]}=...)"
            )

    def _checked_batch(self, predictions, references, call: str):
        """``(predictions, references)`` checked item by item; references filled in when optional."""
        if predictions is None:
            if references is not None:
                raise ValueError(f"{call}: references= given without predictions=")
            if call != "compute":
                raise ValueError(f"{call} needs predictions= (a list of captions)")
            return None, None  # compute() over what add/add_batch stored
        predictions = check_predictions(_as_list(predictions))
        if self.references_input == "ignored":
            return predictions, references
        if references is None:
            if self.references_input == "required":
                raise ValueError(
                    f"{self._metric_label()} needs references= (one list of reference captions per prediction), "
                    "got None"
                )
            return predictions, [[] for _ in predictions]
        optional = self.references_input == "optional"
        return predictions, check_references(_as_list(references), len(predictions), allow_empty=optional)

    def _stored_media(self, kwargs: dict, n: int, call: str) -> dict:
        """``kwargs`` with the images (or videos) of ``n`` predictions as evaluate stores them: each encoded
        losslessly by ``evaluate_storage``, or ``None`` per row when none are given (embeddings at compute).
        The inputs of other modules (a text metric given ``images=``) are accepted and left out, as ``compute``
        ignores them."""
        name = self.media_input
        own = {name, _EMBEDS.get(name)}
        kwargs = {key: value for key, value in kwargs.items() if key not in INPUTS or key in own}
        if name is None:
            return kwargs
        if _EMBEDS[name] in kwargs:
            raise TypeError(
                f"{call} takes {name}=, not {_EMBEDS[name]}= (precomputed embeddings are given to compute(), "
                "for every prediction stored)"
            )
        store = _STORE[name]
        media = kwargs.get(name)
        if media is None:
            return {**kwargs, name: [store(None, i) for i in range(n)]}
        check_same_length(name, media, n)  # a stacked array or tensor is one image (or video) per row
        return {**kwargs, name: [store(item, i) for i, item in enumerate(media)]}

    def _media_for_scorer(self, column, embeds):
        """In ``_compute``: the stored images (or videos) for the plain API, or ``None`` where embeddings (or, for
        EMScore, references alone) stand in for them.

        Raises:
            ValueError: some predictions stored with an image and others without, or images and embeddings both.
        """
        name = self.media_input
        column = [] if column is None else [_READ[name](item) for item in column]
        given = [i for i, item in enumerate(column) if item is not None]
        if embeds is not None:
            if given:
                raise ValueError(
                    f"{self._metric_label()}: prediction {given[0]} was given {name}= (by add/add_batch/compute) "
                    f"and {_EMBEDS[name]}= was given to compute(): give one or the other, for every prediction"
                )
            return None
        if not given:
            return None
        missing = [i for i, item in enumerate(column) if item is None]
        if missing:
            raise ValueError(
                f"{self._metric_label()}: prediction {missing[0]} was stored without {name}= while prediction "
                f"{given[0]} has one: give {name}= with every add/add_batch, or {_EMBEDS[name]}= to compute() "
                "for all of them"
            )
        return column

    def compute(self, *, predictions=None, references=None, **kwargs):
        """evaluate's ``compute``, after every input is checked; load-time options under these; one call at a
        time per object."""
        with self._call_lock:
            self._refuse_foreign_options(kwargs)
            predictions, references = self._checked_batch(predictions, references, "compute")
            name = self.media_input
            if name is not None:
                if predictions is None and kwargs.get(name) is not None:
                    raise ValueError(
                        f"compute: {name}= given without predictions=: give {name}= to add/add_batch with the "
                        f"predictions they belong to (or {_EMBEDS[name]}= to compute)"
                    )
                if kwargs.get(name) is not None and kwargs.get(_EMBEDS[name]) is not None:
                    raise ValueError(f"pass {name}= or {_EMBEDS[name]}=, not both")
                if predictions is not None:
                    kwargs.setdefault(
                        name, None
                    )  # evaluate needs every declared input; add_batch fills it in
            # Checked before evaluate stores the batch: a refused option leaves no half-written cache file whose
            # lock would make the next compute wait for it (evaluate's one-second timeout) and start another file.
            shared = {name: value for name, value in kwargs.items() if name in OPTION_RULE_NAMES}
            options = {**self._load_options, **kwargs, **check_options(**shared)}
            try:
                return super().compute(predictions=predictions, references=references, **options)
            except BaseException:
                self._drop_read_cache_files()
                raise

    def _drop_read_cache_files(self) -> None:
        """After a ``compute`` that raised once evaluate had read its cache files: release their locks and remove
        them, as evaluate does after a ``_compute`` that returns. Left held, the lock of this metric's default cache
        file made every later ``compute`` of the metric in the process (of any module object) wait evaluate's
        one-second timeout for it before taking a file of another name."""
        if self.writer is not None or self.process_id != 0 or self.buf_writer is not None:
            return  # evaluate had not read the files yet (their writer is open), or holds them in memory
        self.data = None  # the dataset over the files, which are about to go
        for lock, path in reversed(list(zip(self.filelocks or [], self.file_paths or [], strict=False))):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            lock.release()
        self.filelocks = None

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """evaluate's ``add_batch``, after every input is checked and images stored losslessly."""
        with self._call_lock:
            predictions, references = self._checked_batch(predictions, references, "add_batch")
            kwargs = self._stored_media(kwargs, len(predictions), "add_batch")
            return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """evaluate's ``add`` of one prediction (and its references, image or video), checked first;
        ``predictions=``/``references=``/``images=``/``videos=`` are read as ``prediction``, ``reference``,
        ``image``, ``video``, as evaluate reads them."""
        prediction = kwargs.pop("predictions", prediction)
        reference = kwargs.pop("references", reference)
        with self._call_lock:
            if prediction is None:
                raise ValueError("add needs prediction= (one caption)")
            if not isinstance(prediction, str):
                raise TypeError(
                    f"prediction must be a string (one caption), got {type(prediction).__name__} "
                    f"({prediction!r:.60}); add_batch takes lists"
                )
            if not has_visible_text(prediction):
                raise ValueError(f"prediction is an empty caption (no visible text: {prediction!r:.40})")
            if self.references_input != "ignored":
                if reference is None:
                    if self.references_input == "required":
                        raise ValueError(
                            f"{self._metric_label()} needs reference= (the list of reference captions), got None"
                        )
                    reference = []
                reference = check_reference_list(
                    _as_list(reference), None, allow_empty=self.references_input == "optional"
                )
            name = self.media_input
            if name is not None:
                item = kwargs.pop(name[:-1], None)  # image= / video=
                item = kwargs.pop(name, item)
                kwargs = self._stored_media({**kwargs, name: None if item is None else [item]}, 1, "add")
                kwargs[name] = kwargs[name][0]
            else:
                kwargs = self._stored_media(kwargs, 1, "add")
            return super().add(prediction=prediction, reference=reference, **kwargs)
