"""How signatures name a model object (``capeval.clip.in_memory``): one revision over everything of it that decides
numbers, its weights, its config and its tokenizer, each digested again only when it changed.

``state-sha256:<12 hex>`` is the sha256 of three digests (``model_object_revision``):

- the weights: sha256 over every tensor of ``state_dict()``, its name, dtype, shape and bytes (``state_digest``),
  after refusing NaN or inf in any of them;
- the config: ``config.to_dict()`` as sorted JSON, without what names a place or a run rather than a computation
  (``_name_or_path``, ``transformers_version``, ``architectures``, ``dtype``, label maps); about 0.4 ms, read at
  every call;
- the tokenizer: its whole vocabulary and merges (the ``tokenizers`` JSON of a fast tokenizer, the SentencePiece
  model proto, else the vocabulary), its normaliser, pre-tokenizer, post-processor, added and special tokens, and
  its settings (lower-casing, maximum length, padding and truncation sides...) (``tokenizer_digest``).

The image processor is not read again: what capeval takes from it (size, resize, crop, resampling, mean/std) is
read once, when the metric is made, into the backbone's fields, and those are in the signature already
(``image_mean``/``image_std``, ``image_resize``; a ``CLIPModel``'s geometry is CLIP's at its config's size).

The weights digest reads every weight (about 1 s at ViT-B/32's size); it is kept per model object with a key of
the state it was computed from, and computed again (NaN/inf check included) when that key differs at a call. The
key reads no weight in full:

- per tensor: the tensor object and its storage (weak references), storage address and offset, shape, strides,
  dtype, device and autograd version counter. The counter is bumped by every in-place write through the tensor or
  a view of it: optimiser steps (for-loop and foreach), ``load_state_dict``, ``p.copy_``/``p.add_`` under
  ``torch.no_grad()``, ``torch.nn.init``, ``set_``; a tensor replaced (``p.data = ...``,
  ``torch.nn.utils.vector_to_parameters``, ``load_state_dict(assign=True)``, ``.to()``/``.half()``) changes the
  storage;
- a probe: the bits of 64 elements of each tensor, its first and last among them (``_probe``), for the writes the
  counter does not see: fused optimiser steps (``fused=True``: torch's fused kernels leave it as it was),
  ``p.data.copy_``/``p.data.mul_`` (``.data`` is a tensor with a counter of its own: EMA updates are often written
  so), writes through ``p.detach().numpy()`` or the storage. Each of these that changes most of a tensor (a dense
  update: every optimiser step and EMA) changes its probe.

Not seen: a write that bypasses the counter and leaves every probed element of every tensor as it was (a few
values written through ``.data``, numpy or a C extension; a sparse fused step touching a few rows of one tensor
only). Scores always come from the weights as they are; such a write leaves the signature (and every cache keyed by
it) naming the previous weights, and a NaN written so is not refused. Write through the parameter under
``torch.no_grad()``, which the counter sees. Where a tensor has no version counter (made under
``torch.inference_mode()``) or no storage (tensor subclasses), nothing is kept: the weights are hashed at every call.

The tokenizer digest (some 40 ms for CLIP's vocabulary) is kept per tokenizer object with a key that is cheap to
read: its settings, its normaliser, pre-tokenizer, post-processor and decoder, its model's options (BPE dropout,
unknown token, suffixes...), added tokens, vocabulary size, 64 of its tokens evenly spaced by id and the ids of two
probe sentences. Not seen: its vocabulary or merges replaced in place (``backend_tokenizer.model = ...``) by others
of the same size that agree on those 64 tokens and on the probe sentences. When the digest is computed again,
capeval's per-tokenizer word cache is dropped with it (``tokenization.forget_tokenizer``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from capeval.clip.checkpoints.files import check_finite

STATE_HASH_PREFIX = "state-sha256:"  # a model object in memory, not files (``sha256:``)
_HASH_CHUNK = (
    1 << 26
)  # bytes of one tensor handed to sha256 at a time (64 MiB): bounded host copies of GPU weights
_PROBED = 64  # elements of each tensor whose bits the probe reads (first and last among them); tokens of a vocabulary
# What a tensor without a version counter, a storage or plain bits raises when asked for them.
_UNTRACKABLE = (RuntimeError, NotImplementedError, AttributeError, TypeError)
_INTEGER_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# Config fields that name a place, a run or a storage type, not a computation (dtype: the weights' own, hashed).
_CONFIG_NOT_NUMBERS = frozenset(
    {"_name_or_path", "transformers_version", "architectures", "dtype", "torch_dtype", "id2label", "label2id"}
)
# Tokenizer attributes that are not how it tokenises: paths, construction arguments (what they built is read from
# the tokenizer itself), caches, logging, chat templates.
_TOKENIZER_NOT_SETTINGS = frozenset(
    {
        "name_or_path",
        "init_inputs",
        "init_kwargs",
        "_vocab",
        "_merges",
        "files_loaded",
        "verbose",
        "deprecation_warnings",
        "_in_target_context_manager",
        "chat_template",
        "response_template",
        "chat_control_tokens",
        "_processor_class",
        "_should_update_post_processor",  # a pending rebuild of the backend's post-processor, which is read itself
        "total_vocab_size",  # a cache of len(tokenizer), which the key reads itself
    }
)
_SPECIAL_TOKEN_SETTINGS = frozenset({"_special_tokens_map", "_extra_special_tokens"})
_PATH_SUFFIXES = ("_file", "_files", "_path", "_dir")
# Tokenised at every call as part of the tokenizer's key: words, numbers, punctuation, capitals, a long word.
_PROBE_TEXTS = [
    "A photo depicts a dog running on the beach.",
    "Two MEN'S bikes, 1234 red-and-white umbrellas; supercalifragilisticexpialidocious!",
]


# --- Weights ---


def hash_weights(module: torch.nn.Module, where: str) -> str:
    """``state-sha256:<12 hex>`` over every tensor of ``module.state_dict()`` alone, computed now (no config, no
    tokenizer: ``hash_model_object`` is the revision).

    Raises:
        ValueError: a floating-point weight holds NaN or inf.
    """
    return hash_state(module.state_dict(), where)


def hash_state(state: Mapping[str, torch.Tensor], where: str) -> str:
    """``state-sha256:<12 hex>`` of ``state_digest``."""
    return STATE_HASH_PREFIX + state_digest(state, where)[:12]


def state_digest(state: Mapping[str, torch.Tensor], where: str) -> str:
    """sha256 (hex) over every tensor of a state dict (name, dtype, shape, bytes), after refusing NaN or inf in any
    of them (``check_finite``, naming the tensors).

    Raises:
        ValueError: a floating-point weight holds NaN or inf.
    """
    check_finite(((name, t.detach()) for name, t in state.items()), where)
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach()
        digest.update(f"{name}|{str(tensor.dtype)}|{tuple(tensor.shape)}\n".encode())
        flat = tensor.contiguous().reshape(-1).view(torch.uint8)
        for start in range(0, flat.numel(), _HASH_CHUNK):
            # .cpu() of a slice: a GPU model's weights cross to the host 64 MiB at a time.
            digest.update(flat[start : start + _HASH_CHUNK].cpu().numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class _KeptWeights:
    """A weights digest with what identifies the state it was computed from (module docstring)."""

    key: tuple  # per tensor: name, version counter, storage address and offset, shape, strides, dtype, device
    objects: tuple  # per tensor: weak references to it and to its storage
    probe: bytes
    digest: str

    def objects_alive(self, tensors: list[torch.Tensor]) -> bool:
        """Whether each tensor, and its storage, is still the object the digest read (an address can be reused by
        a tensor allocated after the first was freed; a dead weak reference says so)."""
        return all(
            tensor_ref() is t and storage_ref() is t.untyped_storage()
            for (tensor_ref, storage_ref), t in zip(self.objects, tensors, strict=True)
        )


# model object -> _KeptWeights. Weak keys: an entry goes with its model; the entry holds no tensor.
_KEPT_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def weights_digest(module: torch.nn.Module, where: str) -> str:
    """sha256 (hex) of the model object's weights (``state_digest``), computed again (NaN/inf check included) only
    when the key, the objects or the probe of its state differ from those its kept digest was computed from.

    Raises:
        ValueError: a floating-point weight holds NaN or inf (nothing is kept then: the next call checks again).
    """
    state = module.state_dict(keep_vars=True)
    tensors = list(state.values())
    # Taken before hashing: a write during the hash makes the next call hash again.
    key = state_key(state)
    try:
        probe = _probe(tensors) if key is not None else None
    except _UNTRACKABLE:  # a tensor subclass without plain bits
        probe = None
    if probe is None:
        return state_digest(state, where)
    with _KEPT_LOCK:
        kept = _KEPT_WEIGHTS.get(module)
    if kept is not None and kept.key == key and kept.probe == probe and kept.objects_alive(tensors):
        return kept.digest
    objects = tuple((weakref.ref(t), weakref.ref(t.untyped_storage())) for t in tensors)
    digest = state_digest(state, where)
    with _KEPT_LOCK:
        _KEPT_WEIGHTS[module] = _KeptWeights(key, objects, probe, digest)
    return digest


def state_key(state: Mapping[str, torch.Tensor]) -> tuple | None:
    """Per tensor of a state dict: its name, autograd version counter, storage address and offset, shape, strides,
    dtype and device, read without reading the weights; ``None`` where a tensor has no version counter or no storage
    (made under ``torch.inference_mode()``, tensor subclasses): such weights are hashed at every call."""
    try:
        return tuple(
            (name, t._version, t.data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype, t.device)
            for name, t in state.items()
        )
    except _UNTRACKABLE:
        return None


def _probed(tensor: torch.Tensor) -> torch.Tensor:
    """A view of ``_PROBED`` elements of ``tensor``: two evenly spaced runs of half as many, the first from its first
    element, the second ending at its last, as integers of the element's size (bits are compared: a NaN equals
    itself, -0.0 differs from 0.0). Called under ``torch.no_grad()``."""
    integer = _INTEGER_OF_SIZE.get(tensor.element_size())
    words = tensor.view(integer) if integer is not None else tensor.contiguous().view(torch.uint8)
    if not words.is_contiguous():
        words = words.reshape(-1)  # a copy: the strides of a view could not reach every element
    n = words.numel()
    if n <= _PROBED:
        return words.reshape(-1)
    runs = _PROBED // 2
    step = (n - 1) // (runs - 1)
    return words.as_strided((2, runs), (n - 1 - (runs - 1) * step, step), words.storage_offset())


def _probe(tensors: list[torch.Tensor]) -> bytes:
    """blake2b of the probed elements of every tensor (``_probed``): a ``torch.cat`` per device, element size and
    view shape, and one copy of its bytes to the host; a write that changes a probed element changes it."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    with torch.no_grad():
        for tensor in tensors:
            part = _probed(tensor)  # one cat per shape kind: flattening each (2, runs) view would copy it
            groups.setdefault((tensor.device, part.dtype, part.dim()), []).append(part)
        digest = hashlib.blake2b(digest_size=16)
        for (device, dtype, dim), parts in groups.items():
            digest.update(f"{device}|{dtype}|{dim}|{len(parts)}\n".encode())
            digest.update(torch.cat(parts).cpu().numpy().tobytes())
    return digest.digest()


# --- Config ---


def config_digest(config) -> str:
    """sha256 (hex) of a transformers config as sorted JSON, without the fields that do not decide numbers
    (``_CONFIG_NOT_NUMBERS``, in sub-configs too); ``""`` for a model without a config."""
    if config is None:
        return ""

    def numbers_only(value):
        if isinstance(value, dict):
            return {k: numbers_only(v) for k, v in value.items() if k not in _CONFIG_NOT_NUMBERS}
        return value

    text = json.dumps(numbers_only(config.to_dict()), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --- Tokenizer ---


def _plain(value, token_text: bool = False):
    """``value`` as nested tuples of scalars (comparable, and the same ``repr`` in every process), or ``_NOT_PLAIN``
    for objects that are not settings (a tokenizer's trie, its SentencePiece processor). An ``AddedToken`` is its
    state, or with ``token_text`` its text only."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v, token_text) for v in value]
        return _NOT_PLAIN if any(i is _NOT_PLAIN for i in items) else tuple(items)
    if isinstance(value, dict):
        items = [(str(k), _plain(v, token_text)) for k, v in value.items()]
        return _NOT_PLAIN if any(v is _NOT_PLAIN for _, v in items) else tuple(sorted(items))
    state = getattr(value, "__getstate__", None)
    if type(value).__name__ == "AddedToken" and state is not None:
        return str(value) if token_text else ("AddedToken", _plain(state()))
    return _NOT_PLAIN


_NOT_PLAIN = object()


def _settings(tokenizer) -> tuple:
    """The tokenizer's own attributes that are plain values (``_plain``), paths and construction arguments left out
    (``_TOKENIZER_NOT_SETTINGS``). Its special tokens by their text: how they split text is the added tokens'
    business (the backend's table, or ``_added_tokens_decoder`` of a Python tokenizer), read in full."""
    out = []
    for name, value in vars(tokenizer).items():
        if name in _TOKENIZER_NOT_SETTINGS or name.endswith(_PATH_SUFFIXES):
            continue
        plain = _plain(value, token_text=name in _SPECIAL_TOKEN_SETTINGS)
        if plain is not _NOT_PLAIN:
            out.append((name, plain))
    return tuple(sorted(out, key=lambda item: item[0]))


def _component(part) -> bytes | None:
    return None if part is None else part.__getstate__()


def _backend_key(backend) -> tuple:
    """What a ``tokenizers.Tokenizer`` reads besides its whole vocabulary and merges: its pipeline's parts (small
    JSON), truncation, padding, added tokens, its model's options, the vocabulary's size and ``_PROBED`` of its
    tokens, evenly spaced by id."""
    model = backend.model
    options = tuple(
        (name, _plain(getattr(model, name)))
        for name in dir(model)
        if not name.startswith("_") and not callable(getattr(model, name))
    )
    added = backend.get_added_tokens_decoder()
    size = backend.get_vocab_size(with_added_tokens=False)
    return (
        type(model).__name__,
        tuple(backend.id_to_token(i) for i in range(0, size, max(1, size // _PROBED))),
        options,
        _component(backend.normalizer),
        _component(backend.pre_tokenizer),
        _component(backend.post_processor),
        _component(backend.decoder),
        _plain(backend.truncation),
        _plain(backend.padding),
        getattr(backend, "encode_special_tokens", None),
        size,
        tuple((i, _plain(added[i])) for i in sorted(added)),
    )


def tokenizer_key(tokenizer) -> tuple:
    """What identifies a tokenizer without reading its whole vocabulary (module docstring): its class, settings,
    its backend's pipeline and options, its size and the ids of ``_PROBE_TEXTS``."""
    backend = getattr(tokenizer, "_tokenizer", None)
    sentencepiece = getattr(tokenizer, "sp_model", None)
    if backend is not None and hasattr(backend, "to_str"):
        inner = ("tokenizers", _backend_key(backend))
        # The backend itself: transformers' __call__ would reset a truncation or padding set on it.
        ids = [e.ids for e in backend.encode_batch(_PROBE_TEXTS, add_special_tokens=True)]
    elif sentencepiece is not None and hasattr(sentencepiece, "serialized_model_proto"):
        size = sentencepiece.GetPieceSize()
        pieces = tuple(sentencepiece.IdToPiece(i) for i in range(0, size, max(1, size // _PROBED)))
        inner = ("sentencepiece", size, pieces)
    else:
        inner = ("vocabulary",)
    if inner[0] != "tokenizers":
        ids = tokenizer(_PROBE_TEXTS, add_special_tokens=True, verbose=False)["input_ids"]
    return (
        f"{type(tokenizer).__module__}.{type(tokenizer).__qualname__}",
        _settings(tokenizer),
        inner,
        len(tokenizer),
        _plain(ids),
    )


def hash_tokenizer(tokenizer, key: tuple | None = None) -> str:
    """sha256 (hex) of a tokenizer, computed now: its key (``tokenizer_key``) but the ids of the probe sentences, and
    its whole vocabulary and merges (the ``tokenizers`` JSON, the SentencePiece model, else its vocabulary)."""
    key = tokenizer_key(tokenizer) if key is None else key
    digest = hashlib.sha256(repr(key[:-1]).encode())  # the probe's ids left out: BPE dropout makes them vary
    kind = key[2][0]
    if kind == "tokenizers":
        digest.update(tokenizer._tokenizer.to_str().encode())
    elif kind == "sentencepiece":
        digest.update(tokenizer.sp_model.serialized_model_proto())
    else:
        digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    return digest.hexdigest()


# tokenizer object -> (its key, its digest). Weak keys: an entry goes with its tokenizer.
_KEPT_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_digest(tokenizer) -> str:
    """``hash_tokenizer``, kept per tokenizer object and computed again when its key changes; capeval's word cache
    of that tokenizer is dropped then (its words may tokenise differently now)."""
    from capeval.clip.tokenization import forget_tokenizer

    key = tokenizer_key(tokenizer)
    try:
        with _KEPT_LOCK:
            kept = _KEPT_TOKENIZERS.get(tokenizer)
    except TypeError:  # not weak-referenceable: nothing is kept
        return hash_tokenizer(tokenizer, key)
    if kept is not None and kept[0] == key:
        return kept[1]
    digest = hash_tokenizer(tokenizer, key)
    forget_tokenizer(tokenizer)
    with _KEPT_LOCK:
        _KEPT_TOKENIZERS[tokenizer] = (key, digest)
    return digest


# --- The revision ---


def _revision(weights: str, config: str, tokenizer: str) -> str:
    digest = hashlib.sha256(f"weights:{weights}\nconfig:{config}\ntokenizer:{tokenizer}\n".encode())
    return STATE_HASH_PREFIX + digest.hexdigest()[:12]


def model_object_revision(module: torch.nn.Module, tokenizer, where: str) -> str:
    """``state-sha256:<12 hex>`` naming a model object as it is now: its weights (kept digest, ``weights_digest``),
    its config and its tokenizer (kept digest, ``tokenizer_digest``).

    Raises:
        ValueError: a floating-point weight holds NaN or inf.
    """
    return _revision(
        weights_digest(module, where),
        config_digest(getattr(module, "config", None)),
        tokenizer_digest(tokenizer),
    )


def hash_model_object(module: torch.nn.Module, tokenizer, where: str) -> str:
    """``model_object_revision`` computed from scratch, nothing kept or read from what is kept."""
    return _revision(
        state_digest(module.state_dict(), where),
        config_digest(getattr(module, "config", None)),
        hash_tokenizer(tokenizer),
    )
