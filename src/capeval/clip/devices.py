"""Where and in which precision models run: the device and dtype options of every CLIP-family metric."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Placement:
    """The ``device`` and ``dtype`` options resolved together, once per metric.

    Attributes:
        device: where the model runs (``None`` asked for: the first GPU if any, else the CPU).
        dtype: its floating-point type.
        asked_device: ``device`` as given: ``None`` when none was named (a model object then stays where it is).
        asked_dtype: ``dtype`` as given, for messages that name the option.
    """

    device: torch.device
    dtype: torch.dtype
    asked_device: object = None
    asked_dtype: object = "float32"


def resolve_placement(device: str | torch.device | None, dtype: str | torch.dtype) -> Placement:
    """``resolve_device`` then ``resolve_dtype``, in one call: a metric checks both options with it before any
    model loads (``capeval.validation.check_options(placement=...)``) and hands the result to ``load_backbone``,
    which then resolves neither again.

    Raises:
        ValueError, TypeError: as ``resolve_device`` and ``resolve_dtype``, the device first.
    """
    return Placement(resolve_device(device), resolve_dtype(dtype), device, dtype)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks the first GPU if any, else the CPU; a named device must exist.

    Raises:
        ValueError: unknown device string, a CUDA device on a machine without one, ``meta`` (it holds no
            data), or a device type this torch cannot make tensors on.
    """
    if device is None:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda', 'cuda:1', ... or None") from err
    if dev.type == "meta":
        raise ValueError(
            f"device {device!r} holds shapes, not numbers: no score can be computed there; use 'cpu', 'cuda', ..."
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but torch sees no CUDA GPU on this machine")
        index = 0 if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} asked for, but only {torch.cuda.device_count()} GPU(s) exist"
            )
        dev = torch.device("cuda", index)
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} asked for, but MPS is not available")
    elif dev.type != "cpu":
        # Any other type torch.device() parses ("xla", "hpu", ...) needs its backend: find out now, not mid-run.
        try:
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError, NotImplementedError) as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"device {device!r}: this torch cannot make tensors there ({reason})") from err
    return dev


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"`` (default), ``"float16"`` or ``"bfloat16"``; torch dtypes are accepted too."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}: use one of {sorted(DTYPES)}")
        return dtype
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be one of {sorted(DTYPES)} or a torch dtype, got {type(dtype).__name__}")
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}: use one of {sorted(DTYPES)}")
    return DTYPES[dtype]
