"""Where the shapes world used to live: ``capeval.testing.shapes`` and ``capeval.testing.tiny_clip`` still
import, from ``capeval.shapes`` (the drawings and the small CLIP trained on them, shipped for offline use). The
test-only helpers moved out of the package, to ``capeval_dev.testing`` in a clone (see CHANGELOG.md)."""
