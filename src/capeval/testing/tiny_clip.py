"""The tiny CLIP builders' former import path: ``capeval.shapes.tiny_clip``, unchanged (see CHANGELOG.md)."""

from capeval.shapes.tiny_clip import *  # noqa: F403
