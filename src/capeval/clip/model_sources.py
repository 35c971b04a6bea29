"""Which form a model named by ``model=`` takes, and where it lives: a Long-CLIP or OpenCLIP file, a local folder or
a Hub id (downloaded when allowed), found before anything is loaded, with errors that say how to make an offline
model available. ``find_model`` answers both in one call, before the backbone cache is asked.

A Hub id outside the local cache is downloaded only after one bounded question to the Hub (``hub_probe``): with
no network, huggingface_hub's five retries took about 25 s before the same refusal. The refusal names the way to
pass a local model in the words of where it was made (``model=`` in Python, ``--model`` on the command line) and
the shapes CLIP shipped with capeval, the one model that loads with no network and no cache.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from capeval.clip.checkpoints.hashes import weights_sha256
from capeval.clip.hub_probe import hub_offline, offline_switch, probe_hub, worth_downloading


def _looks_like_path(model: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else is meant as a folder.
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or (os.sep != "/" and os.sep in model)


def shipped_shapes_clip() -> Path:
    """The folder of the small CLIP trained on drawn shapes that ships inside the package
    (``capeval.shapes.shapes_clip_path()`` returns it): it loads offline, for trying capeval out."""
    return Path(__file__).resolve().parents[1] / "shapes" / "assets" / "shapes-clip"


def local_model_advice(command_line: bool = False) -> str:
    """How to name a model that loads here, in Python's words (``model=``) or the command line's (``--model``)."""
    shapes = str(shipped_shapes_clip())
    option, example = (
        ("--model", f"--model {shlex.quote(shapes)}") if command_line else ("model=", f"model={shapes!r}")
    )
    return (
        f"pass {option} a local CLIP folder (saved with CLIPModel.save_pretrained, with its tokenizer files); the "
        f"shapes CLIP shipped with capeval loads offline, for trying capeval out (a small CLIP trained on drawn "
        f"shapes: its scores mean nothing on photographs): {example}"
    )


def offline_help(model: str, why: str | None = None, command_line: bool = False) -> str:
    """Why a Hub model that is not in the local cache cannot be loaded now, and what to do, naming only settings
    the user made (``HF_HUB_OFFLINE`` is named when it is set, never otherwise).

    Args:
        model: the Hub id.
        why: what the Hub did, as a phrase after "the Hub" (``probe_hub``'s), when it was asked.
        command_line: advice in the command line's words (``--model``) instead of Python's (``model=``).
    """
    if hub_offline():
        switch = offline_switch()
        state = f"{switch} is set"
        fetch = f"run once with network access and without {switch.split('=')[0]}, so it is downloaded into the cache"
    else:
        state = f"the Hub {why}" if why else "the Hub could not be reached"
        fetch = "run once with network access, so it is downloaded into the cache"
    return (
        f"model {model!r} could not be loaded: it is not in the local Hugging Face cache and {state}. Either "
        f"{fetch}, or {local_model_advice(command_line)}"
    )


class HubModelUnavailableError(OSError):
    """A Hub model the local cache lacks and the Hub cannot give now. ``str()`` says what to do in Python's
    words (``model=``); ``command_line`` says it in the command line's (``--model``), for the CLI to print."""

    def __init__(self, model: str, why: str | None = None) -> None:
        super().__init__(offline_help(model, why))
        self.model, self.why = model, why
        self.command_line = offline_help(model, why, command_line=True)

    def __reduce__(self):
        return type(self), (self.model, self.why)


def is_longclip_model(model: str) -> bool:
    """Whether ``model=`` names a Long-CLIP file: ``"longclip:/path/to/longclip-B.pt"`` (``longclip_files``)."""
    from capeval.clip.longclip_files import SPEC_PREFIX

    return model.startswith(SPEC_PREFIX)


def is_open_clip_model(model: str) -> bool:
    """Whether ``model=`` names an OpenCLIP file (``open_clip_files``): a spec, or a weights file rather than a
    folder or Hub id."""
    from capeval.clip.open_clip_files import SPEC_PREFIX, WEIGHT_SUFFIXES

    if model.startswith(SPEC_PREFIX):
        return True
    path = Path(os.path.expanduser(model))
    return path.suffix in WEIGHT_SUFFIXES and path.is_file()


@dataclass(frozen=True)
class ModelSource:
    """The form a ``model=`` string takes and, for a transformers model, where its files are.

    Attributes:
        form: ``"longclip"``, ``"open_clip"`` (read by their own modules from the string) or ``"transformers"``.
        folder: the folder of a transformers model (a Hub snapshot for a Hub id), resolved.
        revision: its revision (``locate_model``).
        hub_id: the Hub id whose snapshot ``folder`` is; ``None`` for a local folder.
    """

    form: str
    folder: Path | None = None
    revision: str | None = None
    hub_id: str | None = None


def find_model(model: str) -> ModelSource:
    """The form ``model=`` takes and, for a folder or Hub id, its folder and revision (``locate_model``).

    Raises:
        ValueError, OSError: see ``locate_model`` (files of the other forms are read by their own modules).
    """
    if is_longclip_model(model):
        return ModelSource("longclip")
    if is_open_clip_model(model):
        return ModelSource("open_clip")
    folder, revision = locate_model(model)
    local = folder.is_dir() and Path(os.path.expanduser(model)).is_dir()
    return ModelSource("transformers", folder, revision, None if local else model)


def locate_model(model: str) -> tuple[Path, str]:
    """Folder holding the model's files and its revision tag, downloading from the Hub if allowed."""
    local = Path(os.path.expanduser(model))
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ValueError(f"model folder {local} has no config.json: not a transformers model folder")
        for entry in local.iterdir():
            # A pipe among the files would block its reader forever, a device never end: refused unread.
            if entry.exists() and not (entry.is_file() or entry.is_dir()):
                raise ValueError(
                    f"model folder {local}: {entry.name} is not a regular file (a device, pipe or socket); "
                    "refused unread"
                )
        return local.resolve(), weights_sha256(local)
    if _looks_like_path(model) or local.exists():
        raise ValueError(f"model {model!r}: no such folder (and it is not a Hub id of the form 'org/name')")
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        cached = isinstance(try_to_load_from_cache(model, "config.json"), str)
    except HFValidationError as err:
        raise ValueError(f"model {model!r} is neither a local folder nor a valid Hub id: {err}") from err
    why = None  # what the Hub said when asked: named in a refusal that follows
    if not cached:
        if hub_offline():
            raise HubModelUnavailableError(model)
        why = probe_hub(model)  # one request, at most PROBE_TIMEOUT_S: never huggingface_hub's retries
        if not worth_downloading(why):
            raise HubModelUnavailableError(model, why)
    try:
        config_path = Path(hf_hub_download(model, "config.json"))
    except LocalEntryNotFoundError as err:  # a subclass of EntryNotFoundError: test it first
        raise HubModelUnavailableError(model, why) from err
    except RepositoryNotFoundError as err:
        raise ValueError(f"unknown model {model!r}: no such repository on the Hugging Face Hub") from err
    except EntryNotFoundError as err:
        raise ValueError(f"model {model!r} has no config.json: not a transformers model") from err
    except OSError as err:
        raise HubModelUnavailableError(model, why) from err
    # Hub snapshots live in .../snapshots/<commit>/: the commit is the revision.
    return config_path.parent, config_path.parent.name[:7]


def model_unavailable(model: str) -> str | None:
    """Why ``model`` cannot be loaded here, found without loading it (so a command refuses before any work).

    A folder must exist and hold ``config.json``; a Hub id must be in the local Hugging Face cache when
    ``HF_HUB_OFFLINE`` is set. Online, a Hub id outside the cache may still download: None.

    Returns:
        The reason in one sentence, or None when the model may load.
    """
    from capeval.clip.longclip_files import resolve_longclip
    from capeval.clip.open_clip_files import SPEC_PREFIX, WEIGHT_SUFFIXES, resolve_open_clip

    if is_longclip_model(model):
        try:
            resolve_longclip(model)
        except (ValueError, FileNotFoundError) as err:
            return str(err)
        return None
    local = Path(os.path.expanduser(model))
    if model.startswith(SPEC_PREFIX) or (local.suffix in WEIGHT_SUFFIXES and not local.is_dir()):
        try:
            resolve_open_clip(model)
        except (ValueError, FileNotFoundError) as err:
            return str(err)
        return None
    if local.is_dir():
        return None if (local / "config.json").is_file() else f"model folder {local} has no config.json"
    if _looks_like_path(model) or local.exists():
        return f"model {model!r}: no such folder (and it is not a Hub id of the form 'org/name')"
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(model, "config.json")
    except HFValidationError as err:
        return f"model {model!r} is neither a local folder nor a valid Hub id: {err}"
    if isinstance(cached, str) or not hub_offline():
        return None
    return f"model {model!r} is not in the local Hugging Face cache and {offline_switch()} is set"


def download_needed(model: str) -> str | None:
    """What loading ``model`` will fetch, when it may load (``model_unavailable`` is None) but is a Hub id outside
    the local cache: loading it then needs the network. None for local files and cached or offline-refused ids.
    """
    local = Path(os.path.expanduser(model))
    if is_longclip_model(model) or is_open_clip_model(model) or local.exists() or _looks_like_path(model):
        return None
    if hub_offline():  # an uncached id is refused then, and model_unavailable says so
        return None
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(model, "config.json")
    except HFValidationError:  # not a Hub id at all: model_unavailable says so
        return None
    if isinstance(cached, str):
        return None
    return f"{model} is not in the local Hugging Face cache; the first use downloads it (network needed)"
