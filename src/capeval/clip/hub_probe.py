"""Whether a Hub model can be had now: in the local Hugging Face cache, or the Hub answering quickly.

Neither a command nor a Space starting up should wait through huggingface_hub's retries (five, with back-off: about
25 s) to learn that the Hub is out of reach. So the Hub is asked once, for the model's ``config.json``, with one
HEAD request and no retry, and the answer is awaited for at most ``PROBE_TIMEOUT_S`` whatever the network does (a
DNS lookup is not bounded by HTTP timeouts, so the request runs in a thread that is given up on). The Hub switched
off (``HF_HUB_OFFLINE``) means unreachable without trying. Model loading (``model_sources.locate_model``) asks
before downloading a model the cache lacks; the Spaces decide their model with it (``capeval.demo.models``).
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

PROBE_TIMEOUT_S = 2.0  # the Hub answers a HEAD in well under a second; a visitor should not wait longer
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


_FALSE = ("", "0", "false", "False", "no")


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off (``HF_HUB_OFFLINE``, or huggingface_hub's own setting)."""
    from huggingface_hub import constants

    return os.environ.get("HF_HUB_OFFLINE", "0") not in _FALSE or constants.is_offline_mode()


def offline_switch() -> str:
    """The setting that switches the Hub off, as set (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``, which
    huggingface_hub also reads, or its offline mode set in Python), for messages to name what the user set."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "0") not in _FALSE:
            return f"{name}={os.environ[name]}"
    return "huggingface_hub's offline mode"


def worth_downloading(why: str | None) -> bool:
    """Whether, after ``probe_hub``'s outcome ``why``, a download is worth trying: the Hub serves the file, or
    answered a client error (4xx, 429 aside) that the download names exactly (no such repository, a gated one, no
    such file) without retrying. Not when the Hub is switched off, unreachable, silent, busy (429) or failing
    (5xx): huggingface_hub would retry those five times, for about 25 s."""
    if why is None:
        return True
    answered = re.match(r"answered (\d+) ", why)
    return answered is not None and 400 <= int(answered.group(1)) < 500 and answered.group(1) != "429"


def is_hub_id(spec: str) -> bool:
    """A model spec that names a Hub repository (``name`` or ``org/name``) rather than a folder on this machine."""
    if Path(os.path.expanduser(spec)).exists() or spec.startswith((".", "/", "~")):
        return False
    return spec.count("/") <= 1 and "\\" not in spec


def in_local_cache(model: str, cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether the Hub model's config and weights are in the local Hugging Face cache (no network)."""
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> bool:
        return isinstance(try_to_load_from_cache(model, name, cache_dir=cache_dir), str)

    return cached("config.json") and any(cached(name) for name in _WEIGHT_FILES)


def probe_hub(
    model: str, timeout: float = PROBE_TIMEOUT_S, endpoint: str | None = None, filename: str = "config.json"
) -> str | None:
    """Ask the Hub once for a file of the repository (by default the model's ``config.json``).

    Args:
        model: a Hub id (``org/name``).
        timeout: seconds to wait for the answer, everything included (name lookup, connection, reply).
        endpoint: the Hub's address (default: huggingface_hub's, i.e. ``HF_ENDPOINT``).
        filename: the file asked for.

    Returns:
        ``None`` when the Hub serves the file, else why not, as a phrase that follows "the Hub"
        (``"is switched off (HF_HUB_OFFLINE=1)"``, ``"did not answer within 2 s"``, ``"answered 404 ..."``);
        ``worth_downloading`` says whether a download may follow.
    """
    if hub_offline():
        return f"is switched off ({offline_switch()})"
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    outcome: list[str | None] = []

    def ask() -> None:
        try:
            # One request (retry_on_errors=False): an unreachable Hub costs one failure, not five back-offs.
            # The join below bounds the wait; the HTTP timeout, a little longer, only lets this thread end.
            url = hf_hub_url(model, filename, endpoint=endpoint)
            get_hf_file_metadata(url, timeout=timeout + 1.0, retry_on_errors=False)
            outcome.append(None)
        except Exception as err:  # noqa: BLE001 - any failure means the model cannot be had now
            outcome.append(_why(err))

    thread = threading.Thread(target=ask, name="capeval-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"did not answer within {timeout:g} s"
    return outcome[0]


def _why(err: Exception) -> str:
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    if status is not None:
        return f"answered {status} for it"
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return f"could not be reached ({first[:160]})"
