"""The docs site builds offline in strict mode (a broken link, a missing anchor or an API name mkdocstrings cannot
find fails), and docs/hooks.py makes its pages from the repository's files without copying them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NO_NETWORK = """
import socket

def _refuse(self, *args, **kwargs):
    raise OSError("network use during the docs build")

socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
"""


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    (root / "sitecustomize.py").write_text(NO_NETWORK)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        "NO_MKDOCS_2_WARNING": "1",  # Material's notice about its end of life, printed on every build
    }
    out = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def test_the_site_builds_offline_in_strict_mode_with_every_page(site):
    for page in (
        "index.html",
        "install/index.html",
        "guides/corpus/index.html",
        "metrics/clipscore/index.html",
        "architecture/index.html",
        "reference/bad-input/index.html",
        "reference/api/corpus/index.html",
    ):
        assert (site / page).is_file(), page
    html = " ".join(p.read_text(encoding="utf-8") for p in site.rglob("*.html"))
    assert "fonts.googleapis.com" not in html and "fonts.gstatic.com" not in html


def test_the_home_page_is_the_readme_with_links_to_the_site_pages(site):
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Five tasks" in home and "source .venv/bin/activate" in home
    assert 'href="guides/python/"' in home and 'href="metrics/clipscore/"' in home
    assert 'href="docs/' not in home


def test_the_corpus_api_page_is_read_from_the_packages_public_names(site):
    page = (site / "reference" / "api" / "corpus" / "index.html").read_text(encoding="utf-8")
    names = _hooks().public_names("capeval.corpus")
    # each name is documented here, or linked to the page that documents it (capeval's own page comes first)
    assert names and all(f'id="{path}"' in page or f'#{path}"' in page for path in names.values())


def test_metric_cards_lose_their_space_front_matter_and_keep_their_text():
    repo = "https://example.org/repo/blob/main/"
    pages = _hooks().generated_pages(repo)
    card = pages["metrics/clipscore.md"]
    assert card.startswith("# Metric Card for CLIPScore") and "sdk: gradio" not in card
    assert pages["index.md"] == _hooks().from_repository(
        (REPO / "README.md").read_text(encoding="utf-8"), repo
    )


@pytest.mark.parametrize(
    ("target", "depth", "link"),
    [
        ("docs/guides/cli.md#formats-and-files", 0, "guides/cli.md#formats-and-files"),
        ("metrics/wmd/README.md", 0, "metrics/wmd.md"),
        ("metrics/wmd/README.md", 1, "../metrics/wmd.md"),
        ("ARCHITECTURE.md", 0, "architecture.md"),
        ("LICENSE", 0, "https://example.org/repo/blob/main/LICENSE"),
        ("https://github.com/aimagelab/pacscore", 0, "https://github.com/aimagelab/pacscore"),
    ],
)
def test_repository_links_become_site_pages_or_repository_files(target, depth, link):
    text = _hooks().from_repository(f"see [it]({target})", "https://example.org/repo/blob/main/", depth)
    assert text == f"see [it]({link})"
