"""capeval where other libraries meet it: evaluate (``capeval.load``), transformers' ``Trainer``
(``make_compute_metrics``) and the Hugging Face Hub (publishing the Spaces and converted PAC-S weights).
torchmetrics and Lightning have their own package, ``capeval.torchmetrics``.

Modules: ``evaluate_modules``, ``module_cache`` (``capeval install-modules``: the modules in evaluate's own cache,
for a bare ``evaluate.load("clipscore")``), ``evaluate_inputs`` (the modules' input checks and lock), ``trainer``,
``hub``. They sit on top of the metrics and the corpus machinery.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "load": "capeval.integrations.evaluate_modules",
    "module_path": "capeval.integrations.evaluate_modules",
    "install_modules": "capeval.integrations.module_cache",
    "GuardedMetric": "capeval.integrations.evaluate_inputs",
    "make_compute_metrics": "capeval.integrations.trainer",
    "CaptionMetrics": "capeval.integrations.trainer",
    "stage_space": "capeval.integrations.hub",
    "push_spaces": "capeval.integrations.hub",
    "push_converted": "capeval.integrations.hub",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
