"""What ``pip install capeval`` brings against ``pip install "capeval[all]"``, and what imports cost.

The installed distributions a requirement set pulls in are followed through their metadata (``Requires-Dist``,
markers evaluated here, extras followed) from this environment, which holds every extra; each closure's size is
the sum of its distributions' files on disk. Then the import figures: ``python -X importtime`` of
``capeval.load("clipscore")`` and of ``capeval corpus --help`` in fresh interpreters, medians of ``--repeats``.

    PYTHONPATH=src python scripts/bench_install.py
    PYTHONPATH=src python scripts/bench_install.py --repeats 5 --wheel dist/capeval-0.2.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent


def declared(extras: tuple[str, ...] = (), pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    """capeval's requirements from ``pyproject``: the core, plus those of ``extras`` (self-references
    such as ``capeval[corpus]`` followed)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project["optional-dependencies"]
    out = [Requirement(r) for r in project["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in optional[extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == "capeval":
                todo.extend(req.extras)
            else:
                out.append(req)
    return out


def closure(requirements: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Every installed distribution ``requirements`` pull in, by canonical name (markers evaluated for this
    interpreter; a requirement not installed here is left out)."""
    found: dict[str, metadata.Distribution] = {}
    visited: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(req, ("",)) for req in requirements]
    while todo:
        req, parent_extras = todo.pop()
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in parent_extras):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        extras = ("", *sorted(req.extras))
        if (name, extras) in visited:
            continue
        visited.add((name, extras))
        found[name] = dist
        for text in dist.requires or []:
            todo.append((Requirement(text), extras))
    return found


def top_level_entries(dist: metadata.Distribution) -> set[str]:
    """The names ``dist`` installs directly in site-packages (packages, modules, .libs folders, its dist-info)."""
    names = set()
    for file in dist.files or []:
        first = Path(str(file)).parts[0]
        if first not in ("..", "__pycache__") and not first.endswith(".pth"):
            names.add(first)
    return names


def size_on_disk(dists: dict[str, metadata.Distribution]) -> int:
    total = 0
    for dist in dists.values():
        for file in dist.files or []:
            path = Path(dist.locate_file(file))
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def link_distributions(dists: dict[str, metadata.Distribution], folder: Path) -> None:
    """``folder`` filled with links to what ``dists`` installed in site-packages: their install, no download."""
    folder.mkdir(parents=True, exist_ok=True)
    for dist in dists.values():
        for entry in top_level_entries(dist):
            source = Path(dist.locate_file(entry))
            if source.exists() and not (folder / entry).exists():
                (folder / entry).symlink_to(source)


def core_virtualenv(root: Path, core: dict[str, metadata.Distribution], wheel: Path) -> Path:
    """A fresh virtualenv (no system site-packages) holding ``wheel`` and the ``core`` distributions (linked from
    this environment through a ``.pth`` line): what ``pip install capeval`` gives. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", root], check=True)
    python = root / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    link_distributions(core, root / "core")
    (Path(site) / "core_dependencies.pth").write_text(f"{root / 'core'}\n")
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*pip, wheel], check=True)
    return python


def import_figures(code: str, repeats: int, python: Path, src: Path | None) -> tuple[int, float]:
    """Modules imported and seconds (``-X importtime``'s cumulative microseconds summed over top-level
    imports), medians over fresh interpreters of ``python`` (capeval from ``src`` where given)."""
    counts, seconds = [], []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    for _ in range(repeats):
        cmd = [python, "-X", "importtime", "-c", code]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        rows = [line for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line]
        rows = rows[1:]  # the header
        counts.append(len(rows))
        top = [r for r in rows if not r.split("|")[2].startswith("  ")]
        seconds.append(sum(int(r.split("|")[1]) for r in top) / 1e6)
    return int(statistics.median(counts)), statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--wheel", type=Path, help="a built wheel, to report its size and what takes it")
    parser.add_argument(
        "--checkout",
        type=Path,
        default=REPO,
        help="measure another checkout (e.g. a worktree of an earlier commit)",
    )
    args = parser.parse_args()
    pyproject = args.checkout / "pyproject.toml"
    optional = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    core = closure(declared(pyproject=pyproject))
    full = closure(declared(tuple(e for e in optional if e not in ("test", "docs")), pyproject=pyproject))
    print(f"core install: {len(core)} distributions, {size_on_disk(core) / 1e6:,.0f} MB")
    print(f"every extra but test and docs: {len(full)} distributions, {size_on_disk(full) / 1e6:,.0f} MB")
    print(f"left out of the core: {', '.join(sorted(set(full) - set(core)))}")
    if args.wheel:
        with zipfile.ZipFile(args.wheel) as zf:
            infos = zf.infolist()
        print(f"wheel: {args.wheel.stat().st_size / 1e6:.2f} MB ({len(infos)} files)")
        biggest = sorted(infos, key=lambda i: -i.compress_size)[:5]
        for info in biggest:
            print(f"  {info.compress_size / 1e6:6.2f} MB  {info.filename}")
    load = "import capeval; capeval.load('clipscore')"
    corpus = (
        "from capeval.cli import main\ntry:\n    main(['corpus', '--help'])\nexcept SystemExit:\n    pass"
    )
    with tempfile.TemporaryDirectory() as tmp:
        places = [("this environment", Path(sys.executable), args.checkout / "src")]
        if args.wheel:
            places.append(
                ("the wheel with the core alone", core_virtualenv(Path(tmp), core, args.wheel), None)
            )
        for where, python, src in places:
            for label, code in (("capeval.load('clipscore')", load), ("capeval corpus --help", corpus)):
                count, secs = import_figures(code, args.repeats, python, src)
                print(
                    f"{where}: {label}: {count:,} modules imported, {secs:.2f} s of imports "
                    f"(median of {args.repeats})"
                )


if __name__ == "__main__":
    main()
