"""Reading gensim's pickled ``KeyedVectors.save`` files (``.kv``, ``.model``) without running anything in them.

gensim's own ``KeyedVectors.load`` unpickles with plain ``pickle`` (a file can run any code) and then loads
sidecar files named inside the pickle, sparse ones through plain ``pickle`` again. Here:

- the pickle is read by an unpickler that resolves only an exact list of (module, name) pairs, looked up in a
  table, never imported by the name the file gives: gensim's vectors and model classes (built empty and filled
  with plain data; no ``__init__`` runs), numpy's array and dtype constructors, and plain containers. Dotted
  names (``gensim.utils`` + ``subprocess.Popen``), other modules and other builtins are refused by name;
- a whole Word2Vec/FastText model's training state (its random generator, hash function) is dropped: those
  names resolve to an inert stand-in, since only the model's ``wv`` is kept;
- sidecar arrays (``<file>.vectors.npy`` ...) are read by numpy with ``allow_pickle=False``, only for attribute
  names that are plain identifiers (so no path leaves the file's folder), after their declared shape is checked
  against their size; sparse sidecars, which gensim reads with plain pickle, are refused;
- the two allowed constructors that allocate what the file asks for, numpy's ``_reconstruct`` (an array of a
  given shape) and ``bytearray`` (of a given length), are bounded by the size of the pickle: a real file builds
  empty arrays and fills them from its own bytes;
- gensim's own up-conversion of older layouts then runs on the loaded data, called through the class (an
  instance attribute in the file cannot stand in for the method).
"""

from __future__ import annotations

import gzip
import os
import pickle
import re
import stat
from pathlib import Path

import numpy as np

from capeval.text.array_pickle import TableUnpickler, array_globals
from capeval.text.vector_headers import check_npy_header, check_npz_member

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnsafeVectorsFile(pickle.UnpicklingError):
    """A vectors file that names something outside the allow-list, or a sidecar it may not name."""


class _Dropped:
    """Stands in for the parts of a whole model that scoring never uses (random state, hash function)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        pass


def _gensim_version() -> str:
    from importlib.metadata import version

    return version("gensim")


def _allowed_globals(limit: int) -> dict[tuple[str, str], object]:
    """Every (module, name) a gensim 3.8/4.x vectors or model pickle may name, and what it resolves to; the
    constructors that allocate are bounded by ``limit`` bytes (the pickle's size)."""
    import collections

    from gensim.models import fasttext, keyedvectors, word2vec

    allowed: dict[tuple[str, str], object] = {}
    kv_names = ("KeyedVectors", "Word2VecKeyedVectors", "Doc2VecKeyedVectors", "EuclideanKeyedVectors")
    for name in kv_names:
        allowed["gensim.models.keyedvectors", name] = keyedvectors.KeyedVectors
    for name in ("Vocab", "CompatVocab"):  # per-word records of pre-4.0 files, up-converted on load
        allowed["gensim.models.keyedvectors", name] = keyedvectors.CompatVocab
    allowed["gensim.models.keyedvectors", "FastTextKeyedVectors"] = fasttext.FastTextKeyedVectors
    allowed["gensim.models.fasttext", "FastTextKeyedVectors"] = fasttext.FastTextKeyedVectors
    allowed["gensim.models.word2vec", "Word2Vec"] = word2vec.Word2Vec
    allowed["gensim.models.fasttext", "FastText"] = fasttext.FastText
    for module, name in (
        ("gensim.models.word2vec", "Word2VecVocab"),
        ("gensim.models.word2vec", "Word2VecTrainables"),
        ("gensim.models.fasttext", "FastTextVocab"),
        ("gensim.models.fasttext", "FastTextTrainables"),
        ("gensim.utils", "call_on_class_only"),
        ("builtins", "hash"),
        ("__builtin__", "hash"),  # Python 2 era files
        ("numpy.random", "__RandomState_ctor"),  # numpy < 1.17
        ("numpy.random._pickle", "__randomstate_ctor"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random._pcg64", "PCG64"),
    ):
        allowed[module, name] = _Dropped
    allowed.update(array_globals(limit, UnsafeVectorsFile))
    for name in ("set", "frozenset", "complex", "int", "float"):
        allowed["builtins", name] = getattr(__import__("builtins"), name)
        allowed["__builtin__", name] = allowed["builtins", name]
    allowed["__builtin__", "long"] = int
    allowed["collections", "OrderedDict"] = collections.OrderedDict
    allowed["collections", "defaultdict"] = collections.defaultdict
    return allowed


def load_gensim_vectors(path: Path):
    """The ``KeyedVectors`` of a gensim ``.save`` file (or of a whole Word2Vec/FastText model), safely.

    Args:
        path: the pickle; sidecars ``<path>.<attribute>.npy`` (``.npz`` for ``.gz`` files) beside it are
            memory-mapped (read into memory for compressed files).

    Raises:
        UnsafeVectorsFile: the file names anything outside the allowed classes, or a sidecar attribute that is
            not a plain identifier, or sparse sidecars (nothing was executed).
        ValueError: not gensim vectors.
        OSError, EOFError: a truncated file or a missing sidecar.
    """
    from gensim.models.fasttext import FastText
    from gensim.models.keyedvectors import KeyedVectors
    from gensim.models.word2vec import Word2Vec
    from gensim.utils import SaveLoad

    compress, subname = SaveLoad._adapt_by_suffix(str(path))
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    obj = TableUnpickler(data, _allowed_globals(len(data)), "a vectors file", UnsafeVectorsFile).load()
    if not isinstance(obj, (KeyedVectors, Word2Vec)):
        raise ValueError(f"vectors {path}: a pickle of {type(obj).__name__}, not gensim vectors")
    _load_sidecars(obj, str(path), None if compress else "r", compress, subname)
    kv = obj.__dict__.get("wv") if isinstance(obj, Word2Vec) else obj
    if not isinstance(kv, KeyedVectors):
        raise ValueError(f"vectors {path}: a {type(obj).__name__} model without KeyedVectors")
    if isinstance(obj, FastText) and "bucket" in obj.__dict__:
        kv.bucket = obj.__dict__["bucket"]  # pre-4.0 FastText kept it on the model (gensim moves it so too)
    # gensim's up-conversion of older layouts, through the class: the sidecar lists are already consumed.
    try:
        type(kv)._load_specials(kv, str(path), None if compress else "r", compress, subname)
    except (TypeError, AttributeError, KeyError) as err:
        # gensim's own refusal of layouts it no longer reads (e.g. fastText files before gensim 3.8).
        raise ValueError(
            f"vectors {path}: gensim {_gensim_version()} cannot read this file's layout: {err}"
        ) from err
    return kv


def _load_sidecars(obj, fname: str, mmap, compress: bool, subname, depth: int = 0) -> None:
    """gensim's ``SaveLoad._load_specials`` sidecar step, with names checked and no pickle read."""
    from gensim.models.keyedvectors import KeyedVectors
    from gensim.models.word2vec import Word2Vec

    state = obj.__dict__

    def names(key: str) -> list[str]:
        value = state.pop(key, [])
        value = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
        for name in value:
            if not (isinstance(name, str) and _IDENTIFIER.fullmatch(name)):
                raise UnsafeVectorsFile(f"refusing sidecar attribute {name!r} (not a plain identifier)")
        return value

    for attrib in names("__recursive_saveloads"):
        child = state.get(attrib)
        if isinstance(child, _Dropped):
            continue  # a whole model's training state (gensim 3's vocabulary, trainables): never read
        if depth > 2 or not isinstance(child, (KeyedVectors, Word2Vec)):
            raise UnsafeVectorsFile(f"refusing sidecar attribute {attrib!r}: a {type(child).__name__}")
        _load_sidecars(child, f"{fname}.{attrib}", mmap, compress, subname, depth + 1)
    for attrib in names("__numpys"):
        file = subname(fname, attrib)
        if os.path.exists(file) and not stat.S_ISREG(os.stat(file).st_mode):
            # A pipe would block forever, a device never end: refused before numpy opens it.
            raise ValueError(f"sidecar {file}: not a regular file (a device, pipe or socket); refused unread")
        if compress:
            check_npz_member(Path(file))
            with np.load(file, allow_pickle=False) as archive:
                value = archive["val"]
        else:
            check_npy_header(Path(file))
            value = np.load(file, mmap_mode=mmap, allow_pickle=False)
        state[attrib] = value
    sparse = names("__scipys")
    if sparse:
        raise UnsafeVectorsFile(
            f"refusing sparse sidecars {sparse} (gensim reads them with plain pickle; word vectors never have them)"
        )
    for attrib in names("__ignoreds"):
        state[attrib] = None
