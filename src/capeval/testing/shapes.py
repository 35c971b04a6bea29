"""The shapes world's former import path: everything of ``capeval.shapes``, unchanged (see CHANGELOG.md)."""

from capeval.shapes import *  # noqa: F403
from capeval.shapes import __all__  # noqa: F401
