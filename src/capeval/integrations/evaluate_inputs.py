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
"""

from __future__ import annotations

import threading

from capeval.validation import check_predictions, check_reference_list, check_references, has_visible_text

REFERENCES = ("required", "optional", "ignored")


def _as_list(values):
    # evaluate takes numpy arrays and pandas series as well as lists; a 0-d array's tolist() is one string,
    # which the checks then refuse as such.
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        return values.tolist()
    return values


class GuardedMetric:
    """Mixin before ``evaluate.Metric`` in capeval's modules: ``class CLIPScore(capeval.GuardedMetric, evaluate.Metric)``.

    Attributes:
        references_input: ``"required"`` (refclipscore, wmd, wembsim); ``"optional"`` (pacscore, emscore:
            omitted, or an empty list for every prediction, means none); ``"ignored"`` (clipscore declares no
            references: evaluate drops them, so a text metric's references can pass through
            ``evaluate.combine``).
    """

    references_input = "ignored"

    def __init__(self, *args, **kwargs) -> None:
        if self.references_input not in REFERENCES:
            raise ValueError(f"references_input must be one of {REFERENCES}, got {self.references_input!r}")
        super().__init__(*args, **kwargs)
        self._call_lock = threading.RLock()

    # A lock does not pickle: a copied or unpickled module gets a fresh one (evaluate keeps modules picklable).
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_call_lock", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._call_lock = threading.RLock()

    def _metric_label(self) -> str:
        return type(self).__name__  # the capeval class name (evaluate's own name is "ref_clip_score")

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

    def compute(self, *, predictions=None, references=None, **kwargs):
        """evaluate's ``compute``, after every prediction and reference is checked; one call at a time per object."""
        with self._call_lock:
            predictions, references = self._checked_batch(predictions, references, "compute")
            return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """evaluate's ``add_batch``, after every prediction and reference is checked (nothing bad is stored)."""
        with self._call_lock:
            predictions, references = self._checked_batch(predictions, references, "add_batch")
            return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """evaluate's ``add`` of one prediction (and its references), checked first; ``predictions=`` and
        ``references=`` are read as ``prediction`` and ``reference``, as evaluate reads them."""
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
            return super().add(prediction=prediction, reference=reference, **kwargs)
