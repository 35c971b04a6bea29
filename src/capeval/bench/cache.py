"""On-disk cache of per-item metric scores, so a rerun or a new metric does not recompute the others.

Layout: ``<root>/<sha256(signature)[:16]>/<benchmark>/<setting>.json`` holding the signature itself and
``{unit key: score}``. A unit key is the item id plus a hash of exactly what the metric saw (candidate,
references, image), so a changed loader or protocol can never serve a stale score. The root is ``cache_dir``,
else ``$CAPEVAL_BENCH_CACHE``, else ``$XDG_CACHE_HOME/capeval/bench`` (``~/.cache/capeval/bench``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path


def default_cache_dir() -> Path:
    if os.environ.get("CAPEVAL_BENCH_CACHE"):
        return Path(os.environ["CAPEVAL_BENCH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capeval" / "bench"


def unit_key(item_id: str, candidate: str, references: Sequence[str] | None, image: object = None) -> str:
    """``<item id>#<12 hex>``: the hash covers the candidate, the references given and the image path."""
    h = hashlib.sha1()
    for part in (candidate, "\x1e".join(references) if references is not None else "\x00none", str(image)):
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    return f"{item_id}#{h.hexdigest()[:12]}"


class ScoreCache:
    """Per-item scores keyed by metric signature, benchmark, setting and unit key."""

    def __init__(self, root: str | os.PathLike | None = None, enabled: bool = True) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        self.enabled = enabled

    def path(self, signature: str, benchmark: str, setting: str) -> Path:
        digest = hashlib.sha256(signature.encode("utf-8")).hexdigest()[:16]
        safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in setting)
        return self.root / digest / benchmark / f"{safe}.json"

    def load(self, signature: str, benchmark: str, setting: str) -> dict[str, float]:
        if not self.enabled:
            return {}
        p = self.path(signature, benchmark, setting)
        if not p.is_file():
            return {}
        try:
            with open(p, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError):
            return {}
        if data.get("signature") != signature:
            return {}
        return {k: float(v) for k, v in data.get("scores", {}).items()}

    def save(self, signature: str, benchmark: str, setting: str, scores: dict[str, float]) -> None:
        """Merge ``scores`` into the stored ones (atomic replace, safe against a crash mid-write)."""
        if not self.enabled or not scores:
            return
        p = self.path(signature, benchmark, setting)
        p.parent.mkdir(parents=True, exist_ok=True)
        merged = {**self.load(signature, benchmark, setting), **scores}
        payload = {"signature": signature, "benchmark": benchmark, "setting": setting, "scores": merged}
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f)
        os.replace(tmp, p)
