"""Captions to L2-normalised CLIP embeddings, each distinct caption encoded once.

Captions are de-duplicated (by string, then by token ids), sorted by length and padded to the longest in each
batch, never to 77: CLIP's text encoder is causal, so padding after end-of-text cannot change the pooled
embedding, and short batches run several times faster.

Tokenising and the forward passes overlap on an accelerator: the distinct captions, ordered by character
length (a close stand-in for their token counts), are tokenised in windows on a background thread while the
model encodes the previous window, each window sorted by token count and cut into batches. The model starts
after the first small window instead of after the whole corpus, and padding stays within a few per cent of
one global sort's. The batches depend only on the captions and the batch size (not on the device or on
threads), so ``capeval.corpus.distributed`` deals out exactly the batches a single process forms.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from capeval.clip.backbones import Backbone
from capeval.clip.batching import (
    BATCH_SIZE,
    _BatchSize,
    gc_paused,
    progress_bar,
    run_with_backoff,
    unique_indices,
)
from capeval.clip.families import text_batch, token_projection, tokenize_texts, tokenize_texts_cut
from capeval.clip.tokenization import with_prefix
from capeval.diagnostics.categories import TruncationWarning, user_stacklevel

FIRST_WINDOW = 1024  # distinct captions tokenised before the first forward pass
WINDOW = 4096  # middle windows: at least 4 batches, so sorting within a window pads little more than one sort
AHEAD = 2  # windows the background thread may tokenise ahead of the model


def tokenize_windows(n: int, batch_size: int) -> list[range]:
    """Consecutive windows over ``n`` distinct captions.

    1,024 and 2,048 captions first, max(4,096, 4 x batch_size) each in the middle, 2,048 and 1,024 last: the
    model waits for 1,024 captions before its first batch, and after tokenising ends 1,024 captions are left
    to encode. Fewer captions: 1,024, then full windows.
    """
    full = max(WINDOW, 4 * batch_size)
    ramp = [FIRST_WINDOW, 2 * FIRST_WINDOW]
    if n >= 2 * sum(ramp) + full:
        middle = n - 2 * sum(ramp)
        sizes = ramp + [full] * (middle // full) + ([middle % full] if middle % full else []) + ramp[::-1]
    else:
        sizes = [FIRST_WINDOW] + [full] * (n // full + 1)
    windows, start = [], 0
    for size in sizes:
        if start >= n:
            break
        windows.append(range(start, min(n, start + size)))
        start += size
    return windows


class CaptionIds:
    """The distinct token-id sequences of some captions, built window by window.

    Attributes:
        ids: distinct id sequences, in the order their windows reached them.
        n_truncated: captions cut to the context length so far.
    """

    def __init__(
        self,
        backbone: Backbone,
        texts: Sequence[str],
        prefix: str | None,
        token_ids: Mapping[str, tuple[tuple[int, ...], bool]] | None = None,
    ) -> None:
        self._backbone = backbone
        self._known = token_ids or {}
        joined = [with_prefix(t, prefix) for t in texts]
        distinct, self._string_inverse = unique_indices(joined)
        self.strings = [joined[i] for i in distinct]
        # Windows follow the strings' character lengths, a close stand-in for their token counts: sorting each
        # window by token count then pads almost as little as one sort of the whole corpus would.
        self._by_length = sorted(range(len(self.strings)), key=lambda i: len(self.strings[i]))
        self.ids: list[tuple[int, ...]] = []
        self._position: dict[tuple[int, ...], int] = {}
        self._string_to_id: list[int] = [-1] * len(self.strings)
        self.n_truncated = 0

    def tokenize(self, window: range) -> tuple[list[list[int]], int]:
        """Token ids of the distinct strings in ``window`` (touches no state: safe on another thread); those given
        as ``token_ids`` are not tokenised again."""
        texts = [self.strings[i] for i in self._by_length[window.start : window.stop]]
        if all(t in self._known for t in texts):
            return [list(self._known[t][0]) for t in texts], sum(self._known[t][1] for t in texts)
        return tokenize_texts(self._backbone, texts)

    def add(self, window: range, tokenized: tuple[list[list[int]], int]) -> list[int]:
        """Record a window's ids (windows in order); returns the positions in ``ids`` first seen there."""
        encoded, n_cut = tokenized
        self.n_truncated += n_cut
        new = []
        for string, x in zip(self._by_length[window.start : window.stop], encoded, strict=True):
            # Different strings can share token ids (case, whitespace): encode each id sequence once.
            key = tuple(x)
            j = self._position.get(key)
            if j is None:
                j = self._position[key] = len(self.ids)
                self.ids.append(key)
                new.append(j)
            self._string_to_id[string] = j
        return new

    @property
    def inverse(self) -> list[int]:
        """For every input caption, the position of its id sequence in ``ids`` (after every window was added)."""
        return [self._string_to_id[j] for j in self._string_inverse]

    def warn_truncated(self) -> None:
        """A ``TruncationWarning`` counting the captions cut to the context length, at the caller's line."""
        if self.n_truncated:
            how = (
                "as clip.tokenize(truncate=True) does"
                if self._backbone.family.is_clip
                else f"by the {type(self._backbone.tokenizer).__name__}'s own truncation"
            )
            what = (
                f"caption(s) longer than {self._backbone.context_length} tokens were truncated (end-of-text kept, "
                f"{how})"
            )
            warnings.warn(
                TruncationWarning(f"{self.n_truncated} {what}", what=what, count=self.n_truncated),
                stacklevel=user_stacklevel(),
            )


def tokenize_unique(
    backbone: Backbone, texts: Sequence[str], prefix: str | None
) -> tuple[list[tuple[int, ...]], list[int]]:
    """Token ids of each distinct caption (after prefix and cleaning), and each input's position among them.

    Warns once with the count of captions cut to the context length.
    """
    captions = CaptionIds(backbone, texts, prefix)
    everything = range(len(captions.strings))
    with gc_paused():
        captions.add(everything, captions.tokenize(everything))
    captions.warn_truncated()
    return captions.ids, captions.inverse


def length_batches(captions: CaptionIds, batch_size: int, background: bool = False) -> Iterator[list[int]]:
    """Batches of positions in ``captions.ids``: each window sorted by length (stable), cut every ``batch_size``.

    With ``background`` the next windows (``AHEAD``) are tokenised on a thread while the caller encodes this
    one's batches; the batches are the same either way.
    """
    windows = tokenize_windows(len(captions.strings), batch_size)

    def prepare(window: range) -> list[list[int]]:
        # Tokenising, de-duplicating and sorting all happen here, on the background thread when there is one:
        # the thread feeding the model is left only padding and the forward passes.
        new = captions.add(window, captions.tokenize(window))
        order = sorted(new, key=lambda i: len(captions.ids[i]))
        return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]

    if not background or len(windows) < 2:
        for window in windows:
            yield from prepare(window)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="capeval-tokenize") as pool:
        # One worker: windows are prepared in order, so ``captions.ids`` grows in the same order either way.
        ahead = [pool.submit(prepare, w) for w in windows[:AHEAD]]
        for k in range(len(windows)):
            batches = ahead.pop(0).result()
            if k + AHEAD < len(windows):
                ahead.append(pool.submit(prepare, windows[k + AHEAD]))
            yield from batches


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids padded to the longest in the batch, and the attention mask: (B, L) long each."""
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    longest = int(lengths.max())
    filled = np.arange(longest)[None, :] < lengths[:, None]
    input_ids = np.full((len(ids), longest), pad_id, dtype=np.int64)
    # Row by row, left to right: the order the flattened ids come in.
    input_ids[filled] = np.fromiter(
        itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())
    )
    return torch.from_numpy(input_ids), torch.from_numpy(filled.astype(np.int64))


@torch.inference_mode()
def _text_forward(backbone: Backbone, ids: list[tuple[int, ...]], want_tokens: bool):
    """Pooled (B, D) embeddings left on the device; with ``want_tokens`` also per-token (L_i, D) on the CPU."""
    # CLIP: right padding to the longest, with the mask; SigLIP: to its fixed length, no mask (families.py).
    input_ids, mask, starts = text_batch(backbone, ids, pad_batch)
    input_ids = input_ids.to(backbone.device, non_blocking=True)
    masks = {} if mask is None else {"attention_mask": mask.to(backbone.device, non_blocking=True)}
    with backbone.forward_mode():
        out = backbone.model.get_text_features(input_ids=input_ids, **masks)
        pooled = F.normalize(out.pooler_output.float(), dim=-1)
        if not want_tokens:
            return pooled
        tokens = token_projection(backbone)(out.last_hidden_state)
    tokens = F.normalize(tokens.float(), dim=-1).cpu()
    return pooled, [tokens[row, s : s + len(x)] for row, (s, x) in enumerate(zip(starts, ids, strict=True))]


def encode_batches(
    backbone: Backbone,
    ids: Sequence[tuple[int, ...]],
    batches: Iterable[list[int]],
    batch_size: int,
    want_tokens: bool,
    bar=None,
) -> tuple[list[int], torch.Tensor, list]:
    """Encode the given batches of positions in ``ids`` (a batch is split only on out-of-memory).

    ``ids`` may grow while ``batches`` is consumed (``length_batches`` adds each window's ids).

    Returns:
        (positions, pooled, tokens): the positions encoded, in batch order; pooled (M, D) float32 on the CPU,
        L2-normalised, row k for positions[k]; with ``want_tokens`` the per-token (L, D) embeddings likewise.
    """
    size = _BatchSize(batch_size)
    positions: list[int] = []
    pieces: list[torch.Tensor] = []
    tokens: list = []

    def run(chunk: list[int]):
        return _text_forward(backbone, [ids[i] for i in chunk], want_tokens)

    for batch in batches:
        for chunk, result in run_with_backoff(run, batch, batch_size, backbone.device, "captions", size):
            emb, toks = result if want_tokens else (result, None)
            positions.extend(chunk)
            pieces.append(emb)
            if want_tokens:
                tokens.extend(toks)
            if bar is not None:
                bar.update(len(chunk))
    if not pieces:
        return positions, torch.zeros(0, backbone.embed_dim), tokens
    # One copy to the host at the end: no per-batch synchronisation stalls the GPU queue.
    return positions, torch.cat(pieces).cpu(), tokens


def _encode_all(
    backbone: Backbone, texts: Sequence[str], prefix, batch_size, progress, want_tokens, token_ids=None
):
    """Every distinct caption encoded; returns (captions, pooled (U, D) by position in ids, tokens by position)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    captions = CaptionIds(backbone, texts, prefix, token_ids)
    # On the CPU the model and the tokenizer would share the same cores: no thread there.
    background = backbone.device.type != "cpu"
    with gc_paused(), progress_bar(len(captions.strings), "captions", progress) as bar:
        batches = length_batches(captions, batch_size, background=background)
        positions, emb, toks = encode_batches(backbone, captions.ids, batches, batch_size, want_tokens, bar)
        bar.update(bar.total - bar.n)  # strings that shared another string's ids
    captions.warn_truncated()
    pooled = torch.empty(len(captions.ids), backbone.embed_dim)
    pooled[torch.tensor(positions, dtype=torch.long)] = emb
    tokens: list = [None] * len(captions.ids)
    if want_tokens:
        for p, t in zip(positions, toks, strict=True):
            tokens[p] = t
    return captions, pooled, tokens


def encode_texts(
    backbone: Backbone,
    texts: Sequence[str],
    prefix: str | None = None,
    batch_size: int = BATCH_SIZE,
    progress: bool | None = None,
    token_ids: Mapping[str, tuple[tuple[int, ...], bool]] | None = None,
) -> torch.Tensor:
    """Embed captions (the prompt ``prefix`` joined in front); each distinct caption is encoded once.

    Args:
        token_ids: ids already made for some of the texts as the model reads them (prefix joined), by text, each
            with whether it was cut to the context length (``tokenize_known``: the corpus engine's workers make
            them); the batches, and so the embeddings, are those of tokenising here.

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order.
    """
    if len(texts) == 0:
        return torch.zeros(0, backbone.embed_dim)
    captions, pooled, _ = _encode_all(backbone, texts, prefix, batch_size, progress, False, token_ids)
    return pooled[captions.inverse]


def tokenize_known(
    backbone: Backbone, texts: Sequence[str], prefix: str | None
) -> dict[str, tuple[tuple[int, ...], bool]]:
    """``token_ids`` for ``encode_texts``: each distinct text's ids as ``backbone`` reads it with ``prefix`` joined,
    keyed by the joined text, and whether it was cut to the context length."""
    joined = list(dict.fromkeys(with_prefix(t, prefix) for t in texts))
    encoded, cut_rows = tokenize_texts_cut(backbone, joined)
    cut = set(cut_rows)
    return {
        text: (tuple(ids), row in cut) for row, (text, ids) in enumerate(zip(joined, encoded, strict=True))
    }


def encode_text_tokens(
    backbone: Backbone,
    texts: Sequence[str],
    prefix: str | None = None,
    batch_size: int = BATCH_SIZE,
    progress: bool | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], list[tuple[int, ...]]]:
    """Global and per-token caption embeddings (EMScore's fine-grained matching).

    Token embeddings are the text encoder's last hidden states (after its final layer norm) passed through
    the text projection and L2-normalised, from start-of-text to end-of-text inclusive.

    Returns:
        (pooled, tokens, ids): pooled (N, D) L2-normalised; tokens[i] (L_i, D); ids[i] the L_i token ids.
    """
    if len(texts) == 0:
        return torch.zeros(0, backbone.embed_dim), [], []
    captions, pooled, tokens = _encode_all(backbone, texts, prefix, batch_size, progress, want_tokens=True)
    inverse = captions.inverse
    return pooled[inverse], [tokens[j] for j in inverse], [captions.ids[j] for j in inverse]
