"""Sharded scoring across processes and GPUs with accelerate: each process encodes its share, all get the result.

Launch a script with ``torchrun --nproc_per_node N script.py`` or ``accelerate launch --multi_gpu
--num_processes N script.py`` (gloo on CPU, NCCL on GPUs) and call ``score_distributed`` in every process::

    from capeval.corpus.distributed import score_distributed
    result = score_distributed("clipscore", captions, images=paths, model="openai/clip-vit-base-patch32")

Every process receives the full result, in input order. The numbers equal a single-process run exactly:
the distinct images (first occurrences, in input order) are cut into the same batches of ``batch_size`` that
``capeval.clip.encode_images`` forms, and the distinct captions into the same length-sorted batches
that ``encode_texts`` forms; the batches are dealt round-robin to the processes and the embeddings summed
back with one all-reduce (each row has one non-zero contributor, so the sum is exact). Videos (EMScore) are
split by video, which changes how frames are batched: equal to a single-process run up to float rounding.

Text-only metrics (WMD, WEmbSim) and the text side of the evaluate modules use evaluate's own
multi-process mode instead (``capeval.load(name, num_process=N, process_id=rank)``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import torch

from capeval.clip.batching import gc_paused, progress_bar, unique_indices
from capeval.clip.image_encoding import encode_images
from capeval.clip.images import image_key
from capeval.clip.text_encoding import CaptionIds, encode_batches, length_batches
from capeval.registry import build_scorer, call_inputs
from capeval.validation import check_same_length


class SingleProcess:
    """The state of a run that was not launched distributed: rank 0 of 1, nothing to synchronise.

    Used instead of accelerate's ``PartialState`` so that scoring in an ordinary process leaves no global
    distributed state behind (a later ``Accelerator`` or ``Trainer`` in the same process chooses freely).
    """

    process_index = 0
    local_process_index = 0
    num_processes = 1
    is_main_process = True
    backend = None
    device = None  # the metric's own default: first GPU if any, else CPU

    def wait_for_everyone(self) -> None:
        return None


_GROUP_STARTED_HERE = False  # whether process_state started this process's group, rather than a caller


def process_state(device: str | torch.device | None = None):
    """This process's place in a distributed launch: accelerate's ``PartialState`` under ``torchrun`` /
    ``accelerate launch`` (or once a Trainer or Accelerator set one up), else ``SingleProcess()``.

    On a machine without GPUs, or when ``device`` names the CPU, processes talk over gloo; with GPUs each
    process gets its own (``state.device``) and NCCL. A group started here is the caller's to end, once no
    process needs it (``torch.distributed.destroy_process_group()``; ``capeval``'s commands call
    ``release_process_group``).
    """
    global _GROUP_STARTED_HERE
    if "accelerate" in sys.modules:  # a Trainer, an Accelerator or a previous call may have set one up
        from accelerate import PartialState

        if PartialState._shared_state:
            return PartialState()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return SingleProcess()
    from capeval.diagnostics.extras import import_extra

    accelerate = import_extra(
        "accelerate", "corpus", "scoring across the processes of a launch (torchrun, accelerate launch)"
    )
    cpu = not torch.cuda.is_available() or (device is not None and torch.device(device).type == "cpu")
    started = not torch.distributed.is_initialized()
    state = accelerate.PartialState(cpu=cpu)
    _GROUP_STARTED_HERE = _GROUP_STARTED_HERE or (started and torch.distributed.is_initialized())
    return state


def release_process_group() -> bool:
    """End the process group ``process_state`` started (never one a caller started): at the end of a command, after
    its last collective. Left to the interpreter's exit, gloo's threads can abort a process whose work is done
    (SIGABRT, "terminate called without an active exception"; pytorch/pytorch#190489). Returns whether one ended.
    """
    global _GROUP_STARTED_HERE
    if not _GROUP_STARTED_HERE:
        return False
    _GROUP_STARTED_HERE = False
    if not torch.distributed.is_initialized():
        return False
    from accelerate import PartialState

    torch.distributed.destroy_process_group()
    PartialState._reset_state()  # a later process_state in this process must not return the ended group's state
    return True


def _blocks(n: int, size: int) -> list[range]:
    return [range(s, min(s + size, n)) for s in range(0, n, size)]


def _reduce_device(state) -> torch.device:
    return torch.device("cpu") if state.backend in (None, "gloo", "mpi") else state.device


def _sum_across(tensor: torch.Tensor, state) -> torch.Tensor:
    if state.num_processes == 1:
        return tensor
    import torch.distributed as dist

    x = tensor.to(_reduce_device(state))
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x.cpu()


def _raise_if_any_failed(error: BaseException | None, state) -> None:
    """Collective: every process raises when any failed, so none waits forever in the next all-reduce."""
    if state.num_processes == 1:
        if error is not None:
            raise error
        return
    from accelerate.utils import gather_object

    messages = gather_object([None if error is None else (type(error).__name__, str(error))])
    failed = [m for m in messages if m is not None]
    if error is not None:
        raise error
    if failed:
        kind, message = failed[0]
        raise (TypeError if kind == "TypeError" else ValueError)(f"{message} (raised in another process)")


def _renumber(err: BaseException, positions: Sequence[int]) -> BaseException:
    """Errors from encoding a sub-list name its position there: put back the index in the caller's list."""
    match = re.match(r"(image|video) (\d+)", str(err))
    if not match or int(match.group(2)) >= len(positions):
        return err
    text = f"{match.group(1)} {positions[int(match.group(2))]}" + str(err)[match.end() :]
    return type(err)(text) if isinstance(err, (ValueError, TypeError)) else err


def sharded_encode_images(
    backbone,
    images: Sequence,
    batch_size: int,
    state,
    num_workers: int | None = None,
    progress: bool | None = None,
) -> torch.Tensor:
    """``encode_images`` with its batches dealt round-robin to the processes; every process gets all rows.

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order, bit-identical to
        ``encode_images(backbone, images, batch_size)`` in one process.
    """
    keys = [image_key(img, i) for i, img in enumerate(images)]
    uniques, inverse = unique_indices(keys)
    out = torch.zeros(len(uniques), backbone.embed_dim)
    mine = [
        j
        for block in _blocks(len(uniques), batch_size)[state.process_index :: state.num_processes]
        for j in block
    ]
    error = None
    if mine:
        try:
            # My blocks are full batches (only the globally last may be short, and it comes last), so
            # encode_images cuts this list into exactly the batches a single process would run.
            emb = encode_images(
                backbone,
                [images[uniques[j]] for j in mine],
                batch_size=batch_size,
                num_workers=num_workers,
                progress=progress if state.is_main_process else False,
            )
            out[mine] = emb
        except (ValueError, TypeError) as err:
            error = _renumber(err, [uniques[j] for j in mine])
    _raise_if_any_failed(error, state)
    return _sum_across(out, state)[inverse]


def sharded_encode_texts(
    backbone,
    texts: Sequence[str],
    prefix: str | None,
    batch_size: int,
    state,
    progress: bool | None = None,
) -> torch.Tensor:
    """``encode_texts`` with its batches (``length_batches``) dealt round-robin to the processes.

    Returns:
        torch.Tensor: (N, D), bit-identical to ``encode_texts(backbone, texts, prefix, batch_size)``.
    """
    if len(texts) == 0:
        return torch.zeros(0, backbone.embed_dim)
    captions = CaptionIds(backbone, texts, prefix)
    with gc_paused():
        batches = list(length_batches(captions, batch_size))
    captions.warn_truncated()
    mine = batches[state.process_index :: state.num_processes]
    out = torch.zeros(len(captions.ids), backbone.embed_dim)
    if mine:
        show = progress if state.is_main_process else False
        with progress_bar(sum(len(b) for b in mine), "captions", show) as bar:
            positions, pooled, _ = encode_batches(backbone, captions.ids, mine, batch_size, False, bar)
        out[positions] = pooled
    return _sum_across(out, state)[captions.inverse]


def sharded_encode_videos(backbone, videos: Sequence, scorer, state) -> list[torch.Tensor]:
    """Frame embeddings of each video, the distinct videos split into one contiguous group per process."""
    from accelerate.utils import gather_object

    from capeval.clip.frame_encoding import encode_videos
    from capeval.clip.video import video_key

    keys = [video_key(v, i) for i, v in enumerate(videos)]
    uniques, inverse = unique_indices(keys)
    per = -(-len(uniques) // state.num_processes)
    mine = list(range(state.process_index * per, min(len(uniques), (state.process_index + 1) * per)))
    pairs: list = []
    error = None
    if mine:
        try:
            embs = encode_videos(
                backbone,
                [videos[uniques[j]] for j in mine],
                num_frames=scorer.num_frames,
                batch_size=scorer.batch_size,
                num_workers=scorer.num_workers,
                progress=scorer.progress if state.is_main_process else False,
            )
            pairs = list(zip(mine, embs, strict=True))
        except (ValueError, TypeError) as err:
            error = _renumber(err, [uniques[j] for j in mine])
    _raise_if_any_failed(error, state)
    gathered = dict(gather_object(pairs)) if state.num_processes > 1 else dict(pairs)
    return [gathered[j] for j in inverse]


def score_sharded(
    scorer: Any,
    predictions: Sequence[str],
    state=None,
    *,
    references: Sequence[Sequence[str]] | None = None,
    images: Sequence | None = None,
    image_embeds=None,
    videos: Sequence | None = None,
    video_embeds=None,
) -> dict:
    """``scorer(predictions, ...)`` with its encoding shared out across processes, then its scoring half.

    The inputs are checked by the metric itself (``checked_inputs``); the images and captions (CLIP-S,
    RefCLIP-S, PAC-S) or the videos (EMScore) are encoded here, each process its share, and the metric scores
    the embeddings (``score_embeddings`` / ``score_frames``). In one process the result equals ``scorer(...)``.
    """
    state = state or process_state()
    predictions, references = scorer.checked_inputs(predictions, references)
    scorer.backbone.refresh()
    n = len(predictions)
    if hasattr(
        scorer, "score_frames"
    ):  # EMScore: its token embeddings are its own, the videos are shared out
        if videos is not None and video_embeds is None and not isinstance(videos, (str, bytes)):
            check_same_length("videos", videos, n)
            frames = sharded_encode_videos(scorer.backbone, videos, scorer, state)
        else:
            frames = scorer.frame_embeddings(videos, video_embeds, n)
        decoded = videos is not None and any(isinstance(v, (str, os.PathLike)) for v in videos)
        return scorer.score_frames(predictions, references, frames, decoded)
    if images is not None and image_embeds is None:
        check_same_length("images", images, n)
        image_emb = sharded_encode_images(
            scorer.backbone, images, scorer.batch_size, state, scorer.num_workers, scorer.progress
        )
    else:
        image_emb = scorer.image_embeddings(images, image_embeds, n)

    def encode_texts(texts: list[str]) -> torch.Tensor:
        return sharded_encode_texts(
            scorer.backbone, texts, scorer.prefix, scorer.batch_size, state, scorer.progress
        )

    text_emb, reference_emb = scorer.caption_and_reference_embeddings(predictions, references, encode_texts)
    return scorer.score_embeddings(image_emb, text_emb, reference_emb)


def score_distributed(
    metric: str | Any,
    predictions: Sequence[str],
    *,
    references: Sequence[Sequence[str]] | None = None,
    images: Sequence | None = None,
    image_embeds=None,
    videos: Sequence | None = None,
    video_embeds=None,
    state=None,
    **options,
) -> dict:
    """Score on every process of a distributed launch; each encodes its share, all return the full result.

    Args:
        metric: a metric name (``"clipscore"``, ``"refclipscore"``, ``"pacscore"``, ``"emscore"``) built with
            ``options`` on this process's device, or a scorer object (``capeval.CLIPScore(...)``).
        predictions: all captions (the same list in every process).
        references, images, image_embeds, videos, video_embeds: as the metric's own call takes them.
        state: an accelerate ``PartialState``; default: this process's.
        **options: metric options (``model``, ``dtype``, ``batch_size``, ...) when ``metric`` is a name.

    Returns:
        dict: the metric's result, identical in every process.
    """
    state = state or process_state(options.get("device"))
    if isinstance(metric, str):
        if state.num_processes > 1:
            options["device"] = state.device  # one GPU per process
        scorer = build_scorer(metric, **options)
    elif options:
        raise TypeError(
            f"options {sorted(options)} only apply to a metric name; this scorer is already built"
        )
    else:
        scorer = metric
    given = {
        "references": references,
        "images": images,
        "image_embeds": image_embeds,
        "videos": videos,
        "video_embeds": video_embeds,
    }
    inputs = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(inputs) - call_inputs(scorer))
    if unknown:
        raise TypeError(f"{type(scorer).__name__} does not take {unknown}")
    return score_sharded(scorer, predictions, state, **inputs)
