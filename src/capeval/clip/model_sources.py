"""Where a model named by ``model=`` lives: a local folder or a Hub id (downloaded when allowed), found before
anything is loaded, with errors that say how to make an offline model available."""

from __future__ import annotations

import os
from pathlib import Path

from capeval.clip.checkpoints.files import weights_sha256


def _looks_like_path(model: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else is meant as a folder.
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or (os.sep != "/" and os.sep in model)


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off (``HF_HUB_OFFLINE``, or huggingface_hub's own setting)."""
    from huggingface_hub import constants

    return (
        os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False", "no")
        or constants.is_offline_mode()
    )


def offline_help(model: str) -> str:
    state = "HF_HUB_OFFLINE=1 is set" if hub_offline() else "the Hub could not be reached"
    return (
        f"model {model!r} could not be loaded: it is not in the local Hugging Face cache and {state}. "
        f"Either run once with network access (unset HF_HUB_OFFLINE) so '{model}' is downloaded, "
        "or pass model='/path/to/a/local/clip/folder' (a folder saved with CLIPModel.save_pretrained, "
        "with its tokenizer files)."
    )


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
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        config_path = Path(hf_hub_download(model, "config.json"))
    except HFValidationError as err:
        raise ValueError(f"model {model!r} is neither a local folder nor a valid Hub id: {err}") from err
    except LocalEntryNotFoundError as err:  # a subclass of EntryNotFoundError: test it first
        raise OSError(offline_help(model)) from err
    except RepositoryNotFoundError as err:
        raise ValueError(f"unknown model {model!r}: no such repository on the Hugging Face Hub") from err
    except EntryNotFoundError as err:
        raise ValueError(f"model {model!r} has no config.json: not a transformers model") from err
    except OSError as err:
        raise OSError(offline_help(model)) from err
    # Hub snapshots live in .../snapshots/<commit>/: the commit is the revision.
    return config_path.parent, config_path.parent.name[:7]


def model_unavailable(model: str) -> str | None:
    """Why ``model`` cannot be loaded here, found without loading it (so a command refuses before any work).

    A folder must exist and hold ``config.json``; a Hub id must be in the local Hugging Face cache when
    ``HF_HUB_OFFLINE`` is set. Online, a Hub id outside the cache may still download: None.

    Returns:
        The reason in one sentence, or None when the model may load.
    """
    from capeval.clip.longclip_files import is_longclip_model, resolve_longclip
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
    return f"model {model!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 is set"


def download_needed(model: str) -> str | None:
    """What loading ``model`` will fetch, when it may load (``model_unavailable`` is None) but is a Hub id outside
    the local cache: loading it then needs the network. None for local files and cached or offline-refused ids.
    """
    from capeval.clip.longclip_files import is_longclip_model
    from capeval.clip.open_clip_files import is_open_clip_model

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
