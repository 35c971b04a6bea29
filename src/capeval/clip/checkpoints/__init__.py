"""PAC-S and other CLIP checkpoints in their authors' formats, loaded into transformers' ``CLIPModel``.

``checkpoint=`` accepts:

- a state-dict file: the PAC-S authors' ``.pth`` (``{"state_dict": {...}}`` holding a full OpenAI-CLIP state
  dict as ``clip/model.py`` names it, or an OpenCLIP one, whose ViT CLIPs use the same names), with or
  without DataParallel ``module.`` prefixes; a state dict already in transformers' names is taken as is.
  Files are read with ``torch.load(weights_only=True)``: nothing in them can run;
- a converted transformers folder (``scripts/convert_pacscore.py`` writes one) or a Hub repo holding one
  (``"org/name"``);
- a file inside a Hub repo: ``"org/name/path/file.pth"``.

Modules: ``files`` (safe reading), ``hashes`` (regular files only, revisions), ``layout`` (architectures, the authors' names to transformers'),
``locate`` (what a ``checkpoint=`` string points at), ``load`` (into a model), ``convert`` (to a folder).

Loading fails loudly instead of half-loading: the architecture (widths, depths, patch, image size, heads)
is compared first, every tensor of the target model must come from the checkpoint and every tensor of the
checkpoint must be used.
"""

from __future__ import annotations

from capeval.clip.checkpoints.convert import convert_pacscore_checkpoint, save_model_folder, write_model_card
from capeval.clip.checkpoints.files import read_model_folder, read_state_dict, torch_load_weights
from capeval.clip.checkpoints.hashes import file_sha256, weights_sha256
from capeval.clip.checkpoints.layout import (
    HEAD_WIDTH,
    PACS_BASE_MODELS,
    CheckpointWarning,
    ClipGeometry,
    base_model_for,
    check_architecture,
    check_config_heads,
    convert_openai_state_dict,
    copy_into,
    is_transformers_layout,
)
from capeval.clip.checkpoints.load import (
    PACS_REPO_URL,
    PACS_WEIGHTS_URL,
    checkpoint_geometry,
    checkpoint_tensors,
    load_checkpoint_into,
    missing_checkpoint_help,
)
from capeval.clip.checkpoints.locate import PROVENANCE_FILE, ResolvedCheckpoint, resolve_checkpoint

__all__ = [
    "HEAD_WIDTH",
    "PACS_BASE_MODELS",
    "PACS_REPO_URL",
    "PACS_WEIGHTS_URL",
    "PROVENANCE_FILE",
    "CheckpointWarning",
    "ClipGeometry",
    "ResolvedCheckpoint",
    "base_model_for",
    "check_architecture",
    "check_config_heads",
    "checkpoint_geometry",
    "checkpoint_tensors",
    "convert_openai_state_dict",
    "convert_pacscore_checkpoint",
    "copy_into",
    "file_sha256",
    "is_transformers_layout",
    "load_checkpoint_into",
    "missing_checkpoint_help",
    "read_model_folder",
    "read_state_dict",
    "resolve_checkpoint",
    "save_model_folder",
    "torch_load_weights",
    "weights_sha256",
    "write_model_card",
]
