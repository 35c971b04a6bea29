"""What capeval tells its user besides results: the warning categories every wing emits (``categories``) and the
summary of a run's warnings (``run_warnings``). The lowest wing: it imports nothing of capeval, and every wing
may import it.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "CapevalWarning": "capeval.diagnostics.categories",
    "EmptyCaptionWarning": "capeval.diagnostics.categories",
    "ZeroVectorWarning": "capeval.diagnostics.categories",
    "TransportWarning": "capeval.diagnostics.categories",
    "TruncationWarning": "capeval.diagnostics.categories",
    "BatchSizeWarning": "capeval.diagnostics.categories",
    "DamagedVideoWarning": "capeval.diagnostics.categories",
    "CheckpointWarning": "capeval.diagnostics.categories",
    "HarmonicMeanWarning": "capeval.diagnostics.categories",
    "ImageConstantsWarning": "capeval.diagnostics.categories",
    "DamagedFileWarning": "capeval.diagnostics.categories",
    "user_stacklevel": "capeval.diagnostics.categories",
    "summarised_warnings": "capeval.diagnostics.run_warnings",
    "WarningTally": "capeval.diagnostics.run_warnings",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
