"""Scoring the files a captioning researcher holds: many metrics x many systems on the same images.

Modules: ``formats`` (COCO results lists, COCO annotations and Karpathy split files for references, image folders
named by id or by COCO's patterns; ids matched in one canonical form), ``systems`` (``score_systems``: the metrics
of ``capeval bench`` by name, one image encoding per backbone shared by metrics and systems) and ``tables`` (the
table: text, Markdown, CSV, JSON; per-image files). Above the metrics, ``bench``, the CLIP engine and ``text``;
below the CLI (``capeval score``).
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "score_systems": "capeval.scoring.systems",
    "SystemScores": "capeval.scoring.systems",
    "read_caption_files": "capeval.scoring.formats",
    "CaptionFiles": "capeval.scoring.formats",
    "InputFileError": "capeval.scoring.formats",
    "render": "capeval.scoring.tables",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
