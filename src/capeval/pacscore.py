"""PAC-S and RefPAC-S (Sarto et al., CVPR 2023) as a plain callable, and the PAC-S weights conversion.

PAC-S is CLIP-S computed with CLIP whose two final projections were fine-tuned by positive-augmented
contrastive learning: PAC-S(c, v) = w * max(cos(E_c, E_v), 0) with w = 2.0, and RefPAC-S the harmonic mean
of PAC-S and the best cosine between the candidate and its references. As in the authors' code
(``evaluation/pac_score/pac_score.py``), candidates and references both get the prompt "A photo depicts",
images get OpenAI's CLIP preprocessing, and the reference side is neither clipped nor rescaled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from capeval.checkpoints import (
    PROVENANCE_FILE,
    ResolvedCheckpoint,
    base_model_for,
    checkpoint_geometry,
    file_sha256,
    missing_checkpoint_help,
    resolve_checkpoint,
)
from capeval.clipscore import CLIPScore, RefCLIPScore
from capeval.encoding import BATCH_SIZE
from capeval.scores import W_PAC_S
from capeval.tokenization import PREFIX


class PACScore(RefCLIPScore):
    """PAC-S per caption, and RefPAC-S when references are given.

    Args:
        checkpoint: PAC-S weights: the authors' ``.pth``, a converted folder, a Hub repo ``org/name`` or a
            Hub file ``org/name/file.pth``. Required: there is no PAC-S without them.
        model: the CLIP the weights go into (its config, tokenizer and preprocessing). ``None`` picks it
            from the checkpoint: the converted folder itself, or for a ``.pth`` the model the published
            checkpoint of that architecture was fine-tuned from (ViT-B/32: ``openai/clip-vit-base-patch32``,
            ViT-L/14: ``laion/CLIP-ViT-L-14-laion2B-s32B-b82K``).
        device, dtype, batch_size, prefix, w, num_workers, progress: as for ``CLIPScore``; ``w`` defaults
            to 2.0.

    Raises:
        ValueError: no checkpoint (the message says where to get one), or one that does not fit ``model``.
        FileNotFoundError: the checkpoint is not where it was said to be.
    """

    name = "pacscore"

    def __init__(
        self,
        checkpoint: str | os.PathLike | None = None,
        model: str | None = None,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = BATCH_SIZE,
        prefix: str = PREFIX,
        w: float = W_PAC_S,
        num_workers: int | None = None,
        progress: bool | None = None,
    ) -> None:
        if checkpoint is None:
            raise ValueError(missing_checkpoint_help())
        resolved = resolve_checkpoint(checkpoint)
        options = dict(
            device=device, dtype=dtype, batch_size=batch_size, prefix=prefix, w=w,
            num_workers=num_workers, progress=progress,
        )  # fmt: skip
        if resolved.kind == "model_folder" and model is None:
            # A converted checkpoint is a whole model: load it as one, nothing goes on top.
            super().__init__(model=str(resolved.path), **options)
            self.checkpoint_tag = resolved.tag
            self.model_name = self.checkpoint_tag
        else:
            if model is None:
                model = base_model_for(checkpoint_geometry(resolved))
            super().__init__(model=model, checkpoint=os.fspath(checkpoint), **options)
            self.checkpoint_tag = self.backbone.weights
            self.model_name = self.backbone.name

    def signature_options(self) -> dict[str, object]:
        return {
            "model": self.model_name,
            "checkpoint": self.checkpoint_tag,
            "prefix": self.prefix,
            "w": self.w,
            "dtype": self.backbone.dtype_name,
        }

    def __call__(
        self,
        predictions: Sequence[str],
        references: Sequence[Sequence[str]] | None = None,
        images: Sequence | None = None,
        image_embeds=None,
    ) -> dict:
        """Score each caption against its image, and against its references when given.

        Returns:
            dict: ``pacscore`` (mean PAC-S), ``scores`` (PAC-S per caption); with references also
            ``refpacscore`` (mean RefPAC-S) and ``refpacscore_scores``; ``signature``.
        """
        if references is None:
            out = CLIPScore.__call__(self, predictions, images=images, image_embeds=image_embeds)
            return {"pacscore": out[self.name], "scores": out["scores"], "signature": out["signature"]}
        # RefCLIPScore's recipe is RefPAC-S's; its keys are renamed (its headline sits under self.name).
        out = RefCLIPScore.__call__(self, predictions, references, images=images, image_embeds=image_embeds)
        return {
            "pacscore": out["clipscore"],
            "scores": out["clipscore_scores"],
            "refpacscore": out[self.name],
            "refpacscore_scores": out["scores"],
            "signature": out["signature"],
        }


def convert_pacscore_checkpoint(
    checkpoint: str | os.PathLike, output: str | os.PathLike, model: str | None = None
) -> Path:
    """Convert PAC-S weights into a self-contained transformers folder (safetensors, tokenizer, preprocessing).

    The folder loads with ``PACScore(checkpoint=folder)`` or ``CLIPModel.from_pretrained``; its
    ``pacscore.json`` records the source file's sha256 and the base model.

    Args:
        checkpoint: the authors' ``.pth`` (or any ``checkpoint=`` form).
        output: folder to write (created; existing files are overwritten).
        model: base model; ``None`` picks it from the checkpoint's architecture as ``PACScore`` does.

    Returns:
        Path: the output folder.
    """
    from capeval import __version__
    from capeval.backbones import load_backbone

    resolved: ResolvedCheckpoint = resolve_checkpoint(checkpoint)
    geometry = checkpoint_geometry(resolved)
    base = model or (str(resolved.path) if resolved.kind == "model_folder" else base_model_for(geometry))
    backbone = load_backbone(base, device="cpu", dtype="float32", checkpoint=os.fspath(checkpoint))
    provenance = {
        "source": resolved.spec if resolved.kind != "state_dict" else Path(resolved.path).name,
        "source_sha256": file_sha256(resolved.path) if resolved.kind == "state_dict" else None,
        "source_tag": backbone.weights,
        "architecture": geometry.name,
        "base_model": backbone.name,
        "converted_with": f"capeval {__version__}",
    }
    return save_model_folder(backbone.model, backbone, output, provenance)


def save_model_folder(model, backbone, folder: str | os.PathLike, provenance: dict) -> Path:
    """Save a CLIPModel as a self-contained folder: safetensors weights, the backbone's tokenizer and
    preprocessing constants, and ``pacscore.json`` (where the weights came from)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    backbone.tokenizer.save_pretrained(out)
    size = backbone.image_size
    preprocessing = {
        "image_processor_type": "CLIPImageProcessor",
        "do_resize": True,
        "size": {"shortest_edge": size},
        "resample": 3,
        "do_center_crop": True,
        "crop_size": {"height": size, "width": size},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(backbone.image_mean),
        "image_std": list(backbone.image_std),
        "do_convert_rgb": True,
    }
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessing, indent=2))
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
    return out


def write_model_card(folder: str | os.PathLike, provenance: dict, repo_id: str | None = None) -> Path:
    """A README.md for a converted folder: where the weights come from and how to use them."""
    use = repo_id or str(folder)
    text = f"""---
library_name: transformers
pipeline_tag: zero-shot-image-classification
tags:
- clip
- pacscore
- image-captioning
- evaluation
---

# PAC-S weights ({provenance.get("architecture")}) as a transformers CLIPModel

The PAC-S checkpoint of Sarto et al., "Positive-Augmented Contrastive Learning for Image and Video
Captioning Evaluation" (CVPR 2023), converted without change of values from the authors' file
`{provenance.get("source")}` (sha256 `{provenance.get("source_sha256")}`, from the Google Drive folder
linked in https://github.com/aimagelab/pacscore) onto `{provenance.get("base_model")}`, by
{provenance.get("converted_with")}.

```python
import capeval
scorer = capeval.PACScore(checkpoint="{use}")
scorer(["a dog runs on the beach"], images=["dog.jpg"])
```

PAC-S = 2.0 * max(cos(image, "A photo depicts " + caption), 0); RefPAC-S adds references by harmonic mean.
The weights are the authors'; their repository states no licence for them: check their terms before reuse.
"""
    path = Path(folder) / "README.md"
    path.write_text(text)
    return path


def push_converted(
    folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None
) -> str:
    """Upload a converted folder to a Hub model repo (created if needed); returns the repo URL."""
    from huggingface_hub import HfApi

    folder = Path(folder)
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise ValueError(
            f"{folder} is not a converted model folder (config.json and model.safetensors needed)"
        )
    api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        repo_type="model",
        commit_message="PAC-S weights converted to transformers CLIPModel by capeval",
    )
    return str(url)
