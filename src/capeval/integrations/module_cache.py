"""Installing the packaged evaluate modules into evaluate's own module cache, so that a bare
``evaluate.load("clipscore")`` works from any directory (``capeval install-modules``).

evaluate 0.4 resolves a bare name by trying the Hub's canonical ``evaluate-metric/<name>`` Space and, when that
fails for any reason (offline mode, no network, no such Space), by importing the newest copy in its module cache:
``HF_MODULES_CACHE/evaluate_modules/metrics/evaluate-metric--<name>/<hash>/<name>.py``, where ``<hash>`` is the
64-hex digest evaluate computes over the script's code (``evaluate.loading.files_to_hash``). This module writes
exactly the folders evaluate writes when it downloads a canonical module, so evaluate's own cache fallback finds
ours. Conditions, named in the docs (docs/guides/evaluate.md) and in the command's help:

- the cache is the one evaluate reads: ``HF_MODULES_CACHE`` (default ``HF_HOME/modules``) as set when
  ``install_modules`` runs must be the one the user's process sees;
- online, evaluate asks the Hub first; while the Hub has no canonical module of that name (none of the six
  names exists there) the miss costs one round of requests, after which the cache answers;
- evaluate logs a warning ("Using the latest cached version of the module") on every such load;
- the copy is the one installed: run the command again after upgrading capeval (older copies are removed).

The layout is evaluate 0.4's (pyproject.toml keeps evaluate < 0.5); tests/test_install_modules.py compares it
with the folders evaluate itself writes for a module it downloads from a stand-in Hub.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from capeval.integrations.evaluate_modules import module_path
from capeval.registry import METRICS

# evaluate.loading.evaluation_module_factory: the first canonical type it tries, and the cache folder it falls back to.
HUB_NAMESPACE = "evaluate-metric"
MODULE_TYPE_DIR = "metrics"  # evaluate's module_type folder for metrics in the dynamic-modules tree
_HASH_LENGTH = 64  # evaluate's CachedEvaluationModuleFactory only considers folders with names this long


@dataclass
class InstalledModule:
    """One module in evaluate's cache: its name, the script evaluate imports, the hash folder and what changed.

    ``status`` is ``"installed"`` (new), ``"updated"`` (files rewritten or older hash folders removed) or
    ``"unchanged"`` (nothing written).
    """

    name: str
    script: Path
    hash: str
    status: str
    removed: list[str] = field(default_factory=list)


def default_modules_cache() -> Path:
    """evaluate's module cache: ``HF_MODULES_CACHE``, else ``HF_HOME/modules`` (as evaluate read them at import)."""
    from evaluate import config

    return Path(config.HF_MODULES_CACHE)


def _write_if_different(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def _copy_if_different(source: Path, target: Path) -> bool:
    if target.is_file() and filecmp.cmp(source, target, shallow=False):
        return False
    shutil.copyfile(source, target)
    return True


def _touch_init(folder: Path) -> bool:
    init = folder / "__init__.py"
    if init.exists():
        return False
    init.touch()
    return True


def _check_cache_folder(cache: Path) -> None:
    """Refuse a module cache that cannot be made a folder, naming the path at fault, before anything is written.

    ``mkdir`` (evaluate's ``init_dynamic_modules`` included) fails on a dangling symbolic link with a bare
    ``[Errno 17] File exists``; the link's target is not created here, since it may lie on a drive that is not
    mounted.

    Raises:
        ValueError: the cache or a folder above it is a symbolic link to nothing, or a file.
    """
    for path in (cache, *cache.parents):
        if path.is_symlink() and not path.exists():
            raise ValueError(
                f"evaluate's module cache {cache}: {path} is a symbolic link to {os.readlink(path)}, which does not "
                "exist (or is a loop of links); create its target folder, or set HF_MODULES_CACHE (or "
                "--modules-cache) to a folder"
            )
        if path.exists():
            if not path.is_dir():
                raise ValueError(f"evaluate's module cache {cache}: {path} is a file, not a folder")
            return


def _check_self_contained(name: str, script: Path) -> None:
    from evaluate.loading import get_imports

    # evaluate hashes and copies a script's relative imports with it; capeval's scripts import only the
    # installed capeval package, and a relative import here would need the same copying to keep the hash right.
    relative = [imp[1] for imp in get_imports(str(script)) if imp[0] != "library"]
    if relative:
        raise ValueError(
            f"module {name!r} ({script}) has relative imports {relative}; install copies one script"
        )


def install_module(name: str, modules_cache: str | os.PathLike | None = None) -> InstalledModule:
    """Place the packaged module ``name`` in evaluate's module cache (see the module docstring).

    Args:
        name: one of ``capeval.METRICS``.
        modules_cache: the cache folder (default: ``default_modules_cache()``, the one evaluate reads).

    Returns:
        What was written, including older hash folders of this name that were removed (evaluate imports the
        newest by file time, so a leftover could win over the current code).

    Raises:
        ValueError: unknown metric, a module that is not a single self-contained script, or a cache that cannot be
            a folder (:func:`_check_cache_folder`).
    """
    from datasets.utils.filelock import FileLock
    from evaluate import config
    from evaluate.loading import files_to_hash

    source = module_path(name) / f"{name}.py"
    _check_self_contained(name, source)
    cache = Path(modules_cache) if modules_cache is not None else default_modules_cache()
    _check_cache_folder(cache)
    # The tree evaluate's init_dynamic_modules makes, written here because that function also appends the cache to
    # sys.path, which would make this process import evaluate_modules from whichever cache came first.
    dynamic = cache / config.MODULE_NAME_FOR_DYNAMIC_MODULES
    code_hash = files_to_hash([str(source)])
    module_dir = dynamic / MODULE_TYPE_DIR / f"{HUB_NAMESPACE}--{name}"
    hash_dir = module_dir / code_hash
    script = hash_dir / f"{name}.py"
    existed = script.is_file()

    hash_dir.mkdir(parents=True, exist_ok=True)
    changed = False
    removed = []
    # The lock evaluate takes while it writes a module's folder (a concurrent evaluate.load or install waits).
    with FileLock(f"{module_dir}.lock"):
        for folder in (cache, dynamic, module_dir.parent, module_dir, hash_dir):
            changed |= _touch_init(folder)
        changed |= _copy_if_different(source, script)
        # evaluate records where the script came from beside it, as <name>.json.
        meta = {"original file path": str(source), "local file path": str(script)}
        changed |= _write_if_different(hash_dir / f"{name}.json", json.dumps(meta))
        for other in sorted(module_dir.iterdir()):
            if other.is_dir() and len(other.name) == _HASH_LENGTH and other.name != code_hash:
                shutil.rmtree(other)
                removed.append(other.name)
    if not existed:
        status = "installed"
    elif changed or removed:
        status = "updated"
    else:
        status = "unchanged"
    return InstalledModule(name, script, code_hash, status, removed)


def install_modules(
    names: Iterable[str] = METRICS, modules_cache: str | os.PathLike | None = None
) -> list[InstalledModule]:
    """``install_module`` for each name (default: all six); idempotent: a second run writes nothing.

    Raises:
        ValueError: an unknown metric name (checked before anything is written).
    """
    names = list(names)
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; capeval ships {', '.join(METRICS)}")
    return [install_module(name, modules_cache) for name in names]
