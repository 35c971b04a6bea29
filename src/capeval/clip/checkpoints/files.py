"""Reading checkpoint files safely: ``torch.load(weights_only=True)``, safetensors, NaN and inf refused (their
hashes: ``hashes``)."""

from __future__ import annotations

import argparse
import json
import pickle
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch

from capeval.clip.checkpoints.hashes import RegularFile, require_regular_file
from capeval.clip.checkpoints.layout import METADATA_KEYS
from capeval.clip.checkpoints.tensor_views import check_declared_sizes


def _data_only_globals() -> list:
    """Plain-data types that training scripts leave next to weights; none of them can run code."""
    import numpy as np

    scalar = np._core.multiarray.scalar if hasattr(np, "_core") else np.core.multiarray.scalar
    names = ("Bool", "Float16", "Float32", "Float64", "Int8", "Int16", "Int32", "Int64")
    names += ("UInt8", "UInt16", "UInt32", "UInt64")
    dtypes = [getattr(np.dtypes, f"{n}DType") for n in names if hasattr(np, "dtypes")]
    return [argparse.Namespace, np.dtype, scalar, (scalar, "numpy.core.multiarray.scalar"), *dtypes]


def _unsafe_globals(path: Path, message: str) -> list[str]:
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # noqa: BLE001 - not a zip checkpoint: fall back to the name in torch's message
        return re.findall(r"GLOBAL ([\w.]+)", message)


_PACS_HINT = (
    "A PAC-S checkpoint needs only tensors: re-save its state dict from a trusted copy, or use a converted "
    "(safetensors) model."
)


def unpickling_refusal(path: Path, err: pickle.UnpicklingError, hint: str = _PACS_HINT) -> ValueError:
    """The error for a file that ``torch.load(weights_only=True)`` refused: the globals it would need, named.

    Globals outside torch can run code; torch's own (a pickled ``nn.Module`` or optimiser, the legacy
    ``torch.save(model)``) are Python objects beyond tensors: both are refusals, not damage. Only a refusal
    naming no global is a truncated or corrupt file."""
    names = _unsafe_globals(path, str(err))
    if names and not any(n.startswith("torch.") for n in names):
        return ValueError(
            f"refused to load {path}: unpickling it needs {', '.join(names)}, which can run arbitrary code, "
            f"and capeval reads weights with torch.load(weights_only=True); nothing in the file was executed. {hint}"
        )
    if names:
        return ValueError(
            f"{path} holds pickled Python objects beyond tensors ({', '.join(sorted(names)[:6])}): refused (weights_only): "
            f"capeval reads weights with torch.load(weights_only=True), which builds tensors and plain data only; "
            f"nothing in the file was executed. {hint}"
        )
    return ValueError(f"{path} is truncated or corrupt: not a readable PyTorch checkpoint ({err})")


def torch_load_weights(path: str | Path, hint: str = _PACS_HINT):
    """``torch.load(path, weights_only=True, map_location="cpu")`` with errors that say what went wrong
    (``hint``: what to do about a refused pickle, for the kind of file expected).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a truncated or corrupt file, one whose unpickling would need code (nothing is run), or one
            whose tensors declare more elements than it holds (``tensor_views.check_declared_sizes``: zero or
            overlapping strides), refused before anything copies them.
    """
    path = Path(path)
    require_regular_file(path)
    return _torch_load(path, hint)


def _torch_load(path: Path, hint: str):
    """``torch_load_weights`` of a file already found regular."""
    try:
        with torch.serialization.safe_globals(_data_only_globals()):
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as err:
                if "mmap" not in str(err):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)  # pre-1.6 (non-zip) format
    except pickle.UnpicklingError as err:
        raise unpickling_refusal(path, err, hint) from err
    except (RuntimeError, EOFError, KeyError, ValueError, OSError) as err:
        raise ValueError(
            f"{path} is truncated or corrupt: not a readable PyTorch checkpoint ({err})"
        ) from err
    check_declared_sizes(obj, path)
    return obj


def read_state_dict(path: str | Path | RegularFile, hint: str = _PACS_HINT) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint file: ``.safetensors``, or a ``torch.save`` file holding a state dict
    directly or under ``"state_dict"`` (the PAC-S layout); ``module.`` prefixes are stripped. ``hint``: what
    to do about a refused pickle (the PAC-S one by default). A ``RegularFile`` (``hashes.weights_file_revision``)
    was found regular when its revision was taken, and is not asked again.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable, unsafe, or not a state dict of tensors.
    """
    if isinstance(path, RegularFile):
        path = path.path
    else:
        path = Path(path)
        require_regular_file(path)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            obj = load_file(path)
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(
                f"{path} is truncated or corrupt: not a readable safetensors file ({err})"
            ) from err
    else:
        obj = _torch_load(path, hint)
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not obj:
        found = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
        raise ValueError(
            f"{path} holds no state dict (expected tensors, or a dict with 'state_dict'); found {found}"
        )
    sd = {}
    for key, value in obj.items():
        name = key[len("module.") :] if isinstance(key, str) and key.startswith("module.") else key
        if name in METADATA_KEYS and not isinstance(value, torch.Tensor):
            continue
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"{path}: entry {key!r} is {type(value).__name__}, not a tensor; expected a state dict "
                f"(tensors only) or a dict with 'state_dict'; top-level keys: {sorted(obj)[:8]}"
            )
        sd[name] = value
    return sd


def read_model_folder(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a transformers folder's safetensors weights (single file or sharded)."""
    from safetensors.torch import load_file

    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        raise FileNotFoundError(f"checkpoint folder {folder} has no model.safetensors (nor its index)")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        require_regular_file(f, "weights file")
        try:
            sd.update(load_file(f))
        except Exception as err:  # noqa: BLE001 - safetensors raises several types for damaged files
            raise ValueError(f"{f} is truncated or corrupt: not a readable safetensors file ({err})") from err
    return sd


def check_pickled_weights(folder: Path, hint: str) -> None:
    """Read the pickled weights of a model folder that transformers will read (``*.bin``, where the folder has no
    safetensors weights) with ``torch_load_weights`` first: a pickle that needs code, or tensors declaring more
    elements than their file holds, are refused naming the file (and the tensor) before transformers reads them.
    A Hub snapshot's weights not yet downloaded are read by transformers alone.

    Raises:
        ValueError: see ``torch_load_weights``; ``hint`` says what to do about a refused pickle.
    """
    if any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").is_file():
        return  # transformers prefers the safetensors weights, whose reader checks every shape against its bytes
    for path in sorted(folder.glob("*.bin")):
        torch_load_weights(path, hint)


def read_model_weights(
    folder: Path, read: Callable[[], torch.nn.Module], what: str, hint: str
) -> torch.nn.Module:
    """The model ``read()`` builds from a model folder's weights (transformers' ``from_pretrained``), with the checks
    on either side of it: pickled weights first (``check_pickled_weights``), then NaN or inf in what was read
    (``check_finite``, naming the weights ``what``).

    Raises:
        ValueError: see ``check_pickled_weights`` and ``check_finite``; whatever ``read`` raises.
    """
    check_pickled_weights(folder, hint)  # before transformers reads them
    model = read()
    check_finite(model.state_dict().items(), what)
    return model


def read_finite_state_dict(
    path: str | Path | RegularFile, what: str, hint: str = _PACS_HINT
) -> dict[str, torch.Tensor]:
    """``read_state_dict`` of a file holding a whole model, refused when a tensor holds NaN or inf (``check_finite``,
    naming the weights ``what``).

    Raises:
        FileNotFoundError, ValueError: see ``read_state_dict`` and ``check_finite``.
    """
    sd = read_state_dict(path, hint)
    check_finite(sd.items(), what)
    return sd


def check_finite(
    tensors: Iterable[tuple[str, torch.Tensor]], what: str, cast_to: torch.dtype | None = None
) -> None:
    """Refuse floating-point tensors holding NaN or inf, naming each with its count of bad values.

    One ``torch.aminmax`` pass per tensor (NaN and inf propagate to its result; no temporary tensor): 0.3 s
    for ViT-B/32's 151M values on 2 CPU cores. Only a flagged tensor is counted value by value.

    Args:
        tensors: ``(name, tensor)`` pairs, e.g. ``model.state_dict().items()``.
        what: the weights as the message names them (a file, a folder, a model).
        cast_to: the dtype the tensors were just cast to, when that cast is what made values infinite.

    Raises:
        ValueError: naming the tensors (the first 6) and how many of their values are not finite.
    """
    bad = []
    for name, tensor in tensors:
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        if not bool(torch.isfinite(torch.stack(torch.aminmax(tensor))).all()):
            count = int((~torch.isfinite(tensor)).sum())
            bad.append(f"{name} ({count} of {tensor.numel()} values)")
    if not bad:
        return
    shown = ", ".join(bad[:6]) + (f", and {len(bad) - 6} more" if len(bad) > 6 else "")
    if cast_to is not None:
        name = str(cast_to).removeprefix("torch.")
        raise ValueError(
            f"{what}: {len(bad)} tensor(s) hold values too large for {name}, which become inf: {shown}; "
            "every score would be NaN. Use dtype='float32' (or 'bfloat16', which has float32's range)"
        )
    raise ValueError(
        f"{what} holds NaN or inf in {len(bad)} tensor(s): {shown}; every score computed with it would be "
        "NaN or meaningless. The file is damaged or was saved from a diverged training run"
    )
