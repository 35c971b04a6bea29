"""Publishing the metrics as Hugging Face Spaces: one Space per metric under an organisation.

A Space folder joins the evaluate module (``metrics/<name>/``: ``<name>.py`` and the metric card, whose front
matter configures the Space) with its demo (``spaces/<name>/app.py``), and a ``requirements.txt`` that pins
this package's release or commit, so that both ``evaluate.load("<org>/<name>")`` and the browser demo run
the code that was published. ``stage_space`` writes exactly the folder that ``push_spaces`` uploads; the
dry run of ``scripts/push_to_hub.py`` stops there.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from capeval.integrations.evaluate_modules import module_path
from capeval.registry import METRICS

REPO_URL = "https://github.com/capeval/capeval"  # pyproject.toml [project.urls] Homepage
SPACE_EXTRAS = "spaces"  # the extra that carries gradio, matplotlib and PyAV
_FRONT_MATTER = re.compile(r"\A---\s*\n(?P<body>.*?)\n---\s*\n", re.S)
_SKIP = ("__pycache__", ".pyc", ".pyi", ".DS_Store")


def repo_root() -> Path:
    """The clone this package runs from (``spaces/`` lives there, not in the wheel)."""
    return Path(__file__).resolve().parents[3]


def requirement(version: str | None = None, commit: str | None = None, repo_url: str = REPO_URL) -> str:
    """The pip requirement of capeval that a Space installs.

    Args:
        version: a release on PyPI (default: this package's version) ...
        commit: ... or a git commit (or tag) of ``repo_url``, which wins when given.
        repo_url: the repository holding ``commit``.
    """
    if commit:
        if not re.fullmatch(r"[\w.\-/]+", commit):
            raise ValueError(f"commit {commit!r} is not a git commit, tag or branch name")
        return f"capeval[{SPACE_EXTRAS}] @ git+{repo_url}@{commit}"
    if version is None:
        from capeval import __version__ as version
    if not re.fullmatch(r"[\w.+\-]+", version):
        raise ValueError(f"version {version!r} is not a release number")
    return f"capeval[{SPACE_EXTRAS}]=={version}"


def front_matter(card: Path) -> dict[str, str]:
    """Top-level ``key: value`` pairs of a card's YAML front matter (enough to check the Space fields)."""
    match = _FRONT_MATTER.match(card.read_text(encoding="utf-8"))
    if not match:
        return {}
    out = {}
    for line in match.group("body").splitlines():
        if line and not line.startswith((" ", "-", "#")) and ":" in line:
            key, value = line.split(":", 1)
            out[key.strip()] = value.strip()
    return out


def _copy_tree(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part.endswith(_SKIP) or part in _SKIP for part in rel.parts):
            continue
        if path.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst / rel)


def _requirements(pin: str, *files: Path) -> str:
    lines = [pin]
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            # capeval itself comes from the pin; everything else is kept once, in order.
            if not line or line.startswith("#") or re.match(r"capeval\b", line):
                continue
            if line not in lines:
                lines.append(line)
    header = "# Written by scripts/push_to_hub.py: the capeval release or commit this Space runs.\n"
    return header + "\n".join(lines) + "\n"


def stage_space(metric: str, out_dir: str | Path, pin: str, spaces_dir: str | Path | None = None) -> Path:
    """Write the Space folder of ``metric`` into ``out_dir/<metric>`` (replacing it) and return it.

    Args:
        metric: one of ``capeval.METRICS``.
        out_dir: where the folder is written.
        pin: the capeval requirement line (see ``requirement``).
        spaces_dir: the folder holding ``<metric>/app.py`` (default: the clone's ``spaces/``).

    Raises:
        ValueError: unknown metric, a missing app, or a card whose front matter does not make a Gradio Space.
    """
    module = module_path(metric)
    space = Path(spaces_dir or repo_root() / "spaces") / metric
    if not (space / "app.py").is_file():
        raise ValueError(f"no Space app for {metric!r}: {space / 'app.py'} is missing")
    card = module / "README.md"
    fields = front_matter(card) if card.is_file() else {}
    for key, want in (("sdk", "gradio"), ("app_file", "app.py")):
        if fields.get(key) != want:
            raise ValueError(
                f"{card}: the Space front matter needs '{key}: {want}' (found {fields.get(key)!r})"
            )
    target = Path(out_dir) / metric
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    _copy_tree(module, target)
    for name in ("app.py",):
        shutil.copy2(space / name, target / name)
    (target / "requirements.txt").write_text(
        _requirements(pin, space / "requirements.txt", module / "requirements.txt"), encoding="utf-8"
    )
    return target


@dataclass
class Published:
    """One Space: its repo id, the local folder and (after a push) its URL."""

    repo_id: str
    folder: Path
    url: str | None = None


def push_spaces(
    org: str,
    out_dir: str | Path,
    pin: str,
    metrics: Sequence[str] = METRICS,
    dry_run: bool = False,
    private: bool = False,
    variables: dict[str, str] | None = None,
    api=None,
    token: str | None = None,
) -> list[Published]:
    """Stage every metric's Space under ``out_dir`` and, unless ``dry_run``, create or update it on the Hub.

    Args:
        org: the Hub organisation (or user) owning the Spaces: ``<org>/<metric>``.
        out_dir: the staging folder (what is uploaded).
        pin: the capeval requirement line.
        metrics: which metrics.
        dry_run: only write the folders.
        private: create new Spaces as private.
        variables: Space variables to set (e.g. ``CAPEVAL_DEMO_CHECKPOINT`` for pacscore).
        api: a ``huggingface_hub.HfApi`` (tests pass a stand-in).
        token: Hub token (default: the logged-in one).
    """
    if not re.fullmatch(r"[\w.\-]+", org):
        raise ValueError(f"organisation {org!r} is not a Hub user or organisation name")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose from {', '.join(METRICS)}")
    out = [Published(f"{org}/{m}", stage_space(m, out_dir, pin)) for m in metrics]
    if dry_run:
        return out
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    for item in out:
        api.create_repo(item.repo_id, repo_type="space", space_sdk="gradio", exist_ok=True, private=private)
        for key, value in (variables or {}).items():
            api.add_space_variable(item.repo_id, key, value)
        api.upload_folder(
            repo_id=item.repo_id,
            repo_type="space",
            folder_path=str(item.folder),
            commit_message=f"capeval: {pin}",
            delete_patterns=["*.py", "*.md", "*.txt"],
        )
        item.url = f"https://huggingface.co/spaces/{item.repo_id}"
    return out


def parse_variables(pairs: Iterable[str]) -> dict[str, str]:
    """``["KEY=value", ...]`` to a dict; refuses entries without ``=``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"Space variable {pair!r} must look like KEY=value")
        out[key] = value
    return out


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
