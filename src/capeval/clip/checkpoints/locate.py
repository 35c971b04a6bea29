"""Finding a ``checkpoint=`` value: a local file or folder, a Hub repo, or a file in a Hub repo."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from capeval.clip.checkpoints.hashes import file_sha256, weights_sha256

PROVENANCE_FILE = "pacscore.json"  # written next to a converted model: where its weights came from
_STATE_DICT_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".safetensors")
_HUB_MODEL_FILES = ("config.json", "model.safetensors")
_HUB_OPTIONAL_FILES = (
    "preprocessor_config.json",
    "processor_config.json",  # where transformers 5 saves the image settings instead
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    PROVENANCE_FILE,
)


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A ``checkpoint=`` value found on disk.

    Attributes:
        spec: the value as given.
        kind: ``"state_dict"`` (one file of tensors) or ``"model_folder"`` (a transformers folder).
        path: the local file or folder (a Hub cache snapshot for Hub sources).
        label: its name in signatures: file stem, folder name or Hub repo id (and file).
    """

    spec: str
    kind: str
    path: Path
    label: str

    @property
    def sha256(self) -> str:
        """``sha256:`` and the first 12 hex digits of the weights (the weight files, for a folder)."""
        if self.kind == "model_folder":
            return weights_sha256(self.path)
        return "sha256:" + file_sha256(self.path)[:12]

    @property
    def tag(self) -> str:
        """``label@sha256:...``: names the exact weights in signatures."""
        return f"{self.label.replace('|', '_')}@{self.sha256}"


def _hub_download(repo_id: str, filename: str, spec: str) -> Path:
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    where = f"file {filename!r} of Hub repo {repo_id!r}"
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id, filename))
    except HFValidationError as err:
        raise ValueError(f"checkpoint {spec!r}: {repo_id!r} is not a valid Hub repo id ({err})") from err
    except LocalEntryNotFoundError as err:  # a subclass of EntryNotFoundError: first
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        why = "HF_HUB_OFFLINE=1 is set" if offline else "the Hub could not be reached"
        raise FileNotFoundError(
            f"checkpoint {spec!r}: looked for {where} in the local cache {constants.HF_HUB_CACHE} "
            f"and did not find it, and {why}"
        ) from err
    except RepositoryNotFoundError as err:
        raise FileNotFoundError(f"checkpoint {spec!r}: no Hub repo {repo_id!r} (looked for {where})") from err
    except EntryNotFoundError as err:
        raise FileNotFoundError(f"checkpoint {spec!r}: Hub repo {repo_id!r} has no {filename!r}") from err


def _hub_model_folder(repo_id: str, spec: str) -> Path:
    from huggingface_hub.errors import EntryNotFoundError

    folder = None
    for name in _HUB_MODEL_FILES:
        folder = _hub_download(repo_id, name, spec).parent
    for name in _HUB_OPTIONAL_FILES:
        try:
            _hub_download(repo_id, name, spec)
        except FileNotFoundError as err:
            if not isinstance(err.__cause__, EntryNotFoundError):
                raise
    return folder


def resolve_checkpoint(spec: str | os.PathLike) -> ResolvedCheckpoint:
    """Find a checkpoint: a local file or folder, a Hub repo (``org/name``) or a Hub file (``org/name/f.pth``).

    Raises:
        TypeError: not a string or path.
        FileNotFoundError: nothing there; the message names every place looked at.
        ValueError: a folder that is not a transformers model folder, or an invalid Hub id.
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a path or a Hub id, got {type(spec).__name__}")
    spec = os.fspath(spec)
    local = Path(os.path.expanduser(spec))
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ValueError(
                f"checkpoint folder {local.absolute()} has no config.json: not a converted transformers model "
                "(scripts/convert_pacscore.py makes one from the authors' .pth)"
            )
        return ResolvedCheckpoint(spec, "model_folder", local.resolve(), local.resolve().name)
    if local.is_file():
        return ResolvedCheckpoint(spec, "state_dict", local.resolve(), local.stem)
    if local.exists():
        raise ValueError(
            f"checkpoint {spec!r}: {local.absolute()} is not a regular file (a device, pipe or socket); refused unread"
        )
    parts = spec.strip("/").split("/")
    explicit_path = spec.startswith((".", "/", "~")) or (os.sep != "/" and os.sep in spec)
    if explicit_path or len(parts) < 2 or (len(parts) == 2 and spec.endswith(_STATE_DICT_SUFFIXES)):
        raise FileNotFoundError(
            f"checkpoint {spec!r} not found: no file or folder at {local.absolute()} (a Hub repo is written "
            "'org/name', a file in one 'org/name/file.pth')"
        )
    repo_id = "/".join(parts[:2])
    if len(parts) == 2:
        return ResolvedCheckpoint(spec, "model_folder", _hub_model_folder(repo_id, spec), repo_id)
    filename = "/".join(parts[2:])
    try:
        path = _hub_download(repo_id, filename, spec)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{err}; nor is there a local file {local.absolute()}") from err.__cause__
    return ResolvedCheckpoint(spec, "state_dict", path, spec)
