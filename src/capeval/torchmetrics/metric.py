"""The base of capeval's torchmetrics classes: the capeval scorer on the metric's device, list states
concatenated across processes, synced reads outside ``compute`` (``per_sample``, ``results``), the plot."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

import torch

from capeval.diagnostics.extras import import_extra

# Refused by the extra's name where torchmetrics is missing, however this module is reached.
Metric = import_extra("torchmetrics", "torchmetrics", "capeval.torchmetrics").Metric
dim_zero_cat = import_extra(
    "torchmetrics.utilities.data", "torchmetrics", "capeval.torchmetrics"
).dim_zero_cat


# The keywords every class passes to torchmetrics' ``Metric`` rather than to the capeval callable.
TORCHMETRICS_OPTIONS = ("sync_on_compute", "process_group", "compute_on_cpu")


def split_arguments(arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A constructor's arguments, its ``locals()`` before it assigns anything, split into the capeval callable's
    options and torchmetrics' own: each class spells its keywords once, in its signature.

    Returns:
        tuple: ``(options, torchmetrics_options)``, each in the signature's order (``self`` and the ``__class__``
        cell of a zero-argument ``super()`` left out).
    """
    options = {
        name: value
        for name, value in arguments.items()
        if name not in ("self", "__class__", *TORCHMETRICS_OPTIONS)
    }
    return options, {name: arguments[name] for name in TORCHMETRICS_OPTIONS}


class CapevalMetric(Metric):
    """What the six share: the capeval scorer (built lazily on the right device), float64 per-sample states,
    synced reads outside ``compute``."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    scorer_class: type
    name: str

    def __init__(
        self, options: dict[str, Any], sync_on_compute: bool, process_group: Any, compute_on_cpu: bool
    ) -> None:
        super().__init__(
            sync_on_compute=sync_on_compute, process_group=process_group, compute_on_cpu=compute_on_cpu
        )
        self._options = options
        self._scorer = None
        self._scorer_device: str | None = None
        self._state_dtypes: dict[str, torch.dtype] = {}

    # -- the capeval scorer ----------------------------------------------------------------------------
    def _wanted_device(self) -> str | None:
        if "device" not in self._options:  # word-vector metrics: no device
            return None
        model = self._options.get("model")
        if self._options["device"] is not None or not (
            model is None or isinstance(model, (str, os.PathLike))
        ):
            return self._options["device"]
        return str(self.device)

    @property
    def scorer(self):
        """The capeval callable this metric scores with (``capeval.CLIPScore``, ...), on the metric's device."""
        device = self._wanted_device()
        if self._scorer is None or device != self._scorer_device:
            options = dict(self._options)
            if "device" in options:
                options["device"] = device
            self._scorer = self.scorer_class(**options)
            self._scorer_device = device
        return self._scorer

    def __getstate__(self) -> dict[str, Any]:
        # A pickled metric (Lightning's spawn strategies, deepcopy) carries its options, not a loaded model.
        state = super().__getstate__()
        state["_scorer"] = None
        return state

    # -- states ----------------------------------------------------------------------------------------
    def _add_list_state(self, name: str, dtype: torch.dtype = torch.float64) -> None:
        self.add_state(name, default=[], dist_reduce_fx="cat")
        self._state_dtypes[name] = dtype

    def _sync_dist(self, dist_sync_fn=None, process_group=None) -> None:
        # torchmetrics stands in for an empty list state with an empty tensor of the metric's float32 dtype; gathered
        # against another rank's float64 or uint8 tensor the byte counts differ and gloo aborts. An empty tensor of
        # the state's own dtype keeps a process without data (uneven DDP shards) in step.
        for name, dtype in self._state_dtypes.items():
            if isinstance(getattr(self, name), list) and not getattr(self, name):
                setattr(self, name, [torch.empty(0, dtype=dtype, device=self.device)])
        super()._sync_dist(dist_sync_fn, process_group=process_group)

    def _append(self, name: str, values, dtype=torch.float64) -> None:
        if isinstance(values, bytes):
            values = torch.frombuffer(bytearray(values), dtype=torch.uint8) if values else []
        getattr(self, name).append(torch.as_tensor(values, dtype=dtype, device=self.device).reshape(-1))

    def _cat(self, name: str, dtype=torch.float64) -> torch.Tensor:
        state = getattr(self, name)
        if isinstance(state, list) and not state:
            return torch.empty(0, dtype=dtype, device=self.device)
        # Each state in its own dtype, whatever set_dtype() made of floating states since.
        return dim_zero_cat(state).to(dtype)

    def _scores(self, name: str) -> torch.Tensor:
        scores = self._cat(name)
        if scores.numel() == 0:
            raise ValueError(
                f"{type(self).__name__}: no predictions were scored: call update() before compute()"
            )
        return scores

    @contextmanager
    def _synced(self):
        """The states of every process, as ``compute`` sees them (a no-op outside DDP or when already synced)."""
        should_sync = self._to_sync and not self._is_synced
        with self.sync_context(
            dist_sync_fn=self.dist_sync_fn, should_sync=should_sync, should_unsync=self._should_unsync
        ):
            yield

    def per_sample(self) -> torch.Tensor:
        """(N,) float64: the per-sample scores (the callable's ``"scores"``) of every update, in update order."""
        with self._synced():
            return self._per_sample().clone()

    def results(self) -> dict[str, Any]:
        """The capeval callable's dict (headline, ``"scores"``, extras, ``"signature"``) over every update."""
        with self._synced():
            out = self._results()
        out["signature"] = out.pop("signature")  # last, as in the callables' dicts
        return out

    def plot(self, val=None, ax=None):
        """torchmetrics' plot of ``compute()`` (or of the values given): ``(figure, axes)``."""
        return self._plot(val, ax)

    def _per_sample(self) -> torch.Tensor:
        return self._scores(f"{self.name}_scores")

    def compute(self) -> torch.Tensor:
        """The corpus score: the mean of the per-sample scores, as the callable's headline."""
        return self._per_sample().mean()

    def _results(self) -> dict[str, Any]:
        scores = self._per_sample()
        return {
            self.name: float(scores.mean()),
            "scores": scores.tolist(),
            "signature": self.scorer.signature,
        }
