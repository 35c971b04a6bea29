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

from capeval._lazy import lazy_exports

_PUBLIC = {
    "HEAD_WIDTH": "capeval.clip.checkpoints.layout",
    "PACS_BASE_MODELS": "capeval.clip.checkpoints.layout",
    "PACS_REPO_URL": "capeval.clip.checkpoints.load",
    "PACS_WEIGHTS_URL": "capeval.clip.checkpoints.load",
    "PROVENANCE_FILE": "capeval.clip.checkpoints.locate",
    "CheckpointWarning": "capeval.clip.checkpoints.layout",
    "ClipGeometry": "capeval.clip.checkpoints.layout",
    "ResolvedCheckpoint": "capeval.clip.checkpoints.locate",
    "base_model_for": "capeval.clip.checkpoints.layout",
    "check_architecture": "capeval.clip.checkpoints.layout",
    "check_config_heads": "capeval.clip.checkpoints.layout",
    "checkpoint_geometry": "capeval.clip.checkpoints.load",
    "checkpoint_tensors": "capeval.clip.checkpoints.load",
    "convert_openai_state_dict": "capeval.clip.checkpoints.layout",
    "convert_pacscore_checkpoint": "capeval.clip.checkpoints.convert",
    "copy_into": "capeval.clip.checkpoints.layout",
    "file_sha256": "capeval.clip.checkpoints.hashes",
    "is_transformers_layout": "capeval.clip.checkpoints.layout",
    "load_checkpoint_into": "capeval.clip.checkpoints.load",
    "missing_checkpoint_help": "capeval.clip.checkpoints.load",
    "read_model_folder": "capeval.clip.checkpoints.files",
    "read_state_dict": "capeval.clip.checkpoints.files",
    "resolve_checkpoint": "capeval.clip.checkpoints.locate",
    "save_model_folder": "capeval.clip.checkpoints.convert",
    "torch_load_weights": "capeval.clip.checkpoints.files",
    "weights_sha256": "capeval.clip.checkpoints.hashes",
    "write_model_card": "capeval.clip.checkpoints.convert",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
