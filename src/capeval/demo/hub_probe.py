"""Whether a demo can have a Hub model now: in the local Hugging Face cache, or the Hub answering quickly.

A Space decides its model when it starts, and a visitor pressing Score must not wait through
huggingface_hub's retries (five, with back-off: about 25 s) to learn that the Hub is out of reach. So the
Hub is asked once, for the model's ``config.json``, with one HEAD request and no retry, and the answer is
awaited for at most ``PROBE_TIMEOUT_S`` whatever the network does (a DNS lookup is not bounded by HTTP
timeouts, so the request runs in a thread that is given up on). ``HF_HUB_OFFLINE`` set means unreachable
without trying.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from capeval.clip.backbones import hub_offline

PROBE_TIMEOUT_S = 2.0  # the Hub answers a HEAD in well under a second; a visitor should not wait longer
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


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
        (``"is switched off (HF_HUB_OFFLINE=1)"``, ``"did not answer within 2 s"``, ``"answered 404 ..."``).
    """
    if hub_offline():
        return "is switched off (HF_HUB_OFFLINE=1)"
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
