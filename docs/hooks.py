"""MkDocs hook: the pages the site builds from files kept elsewhere in the repository, never copied by hand.

- ``index.md`` is the README (the front door on GitHub and on the site alike);
- ``metrics/<name>.md`` is each metric card, ``metrics/<name>/README.md`` (the Space front matter dropped);
- ``architecture.md`` is ``ARCHITECTURE.md``;
- ``reference/api/<package>.md`` lists, for mkdocstrings, the public names of a package (its ``_PUBLIC`` map,
  the same map its lazy ``__getattr__`` reads), each at the module that defines it, so the reference follows
  the code when a name moves.

Links in the repository files point at repository paths (``docs/guides/cli.md``, ``metrics/wmd/README.md``);
here they become the site's pages, and a link to any other repository file becomes a link to the repository.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parent.parent
METRICS = ("clipscore", "refclipscore", "pacscore", "wembsim", "wmd", "emscore")
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")

# page -> (package, what it is for); the packages' public names as the code declares them
API_PAGES = {
    "reference/api/capeval.md": ("capeval", "The package's public names (`capeval.__all__`)."),
    "reference/api/corpus.md": ("capeval.corpus", "Scoring and filtering corpora."),
    "reference/api/torchmetrics.md": (
        "capeval.torchmetrics",
        "The metrics as `torchmetrics.Metric` classes.",
    ),
    "reference/api/scoring.md": ("capeval.scoring", "Caption files and many systems."),
    "reference/api/bench.md": ("capeval.bench", "Benchmarks of agreement with human judgments."),
    "reference/api/clip.md": ("capeval.clip", "The CLIP engine."),
    "reference/api/text.md": ("capeval.text", "The word-vector engine."),
    "reference/api/integrations.md": ("capeval.integrations", "evaluate, transformers' Trainer and the Hub."),
    "reference/api/diagnostics.md": ("capeval.diagnostics", "Warning categories."),
}


def repository_url(config) -> str:
    return str(config["repo_url"]).rstrip("/") + "/blob/main/"


def site_link(target: str, repo_url: str) -> str:
    """The site's page for a repository path (``docs/x.md`` -> ``x.md``), else the file in the repository."""
    path, _, anchor = target.partition("#")
    anchor = f"#{anchor}" if anchor else ""
    if path.startswith("docs/"):
        return path.removeprefix("docs/") + anchor
    match = re.fullmatch(r"metrics/(\w+)/README\.md", path)
    if match and match.group(1) in METRICS:
        return f"metrics/{match.group(1)}.md{anchor}"
    if path == "ARCHITECTURE.md":
        return "architecture.md" + anchor
    if path == "README.md":
        return "index.md" + anchor
    return repo_url + path + anchor


def from_repository(text: str, repo_url: str, depth: int = 0) -> str:
    """A repository Markdown file as a page ``depth`` folders below the site's root."""
    up = "../" * depth

    def link(match: re.Match) -> str:
        target = site_link(match.group(1), repo_url)
        return f"]({target if target.startswith(('http', '#')) else up + target})"

    return LINK.sub(link, FRONT_MATTER.sub("", text, count=1).lstrip("\n"))


def public_names(package: str) -> dict[str, str]:
    """``{name: defining module}`` of a package's lazy public names (``module:attr`` spellings resolved)."""
    module = importlib.import_module(package)
    table = getattr(module, "_PUBLIC", None) or module._LAZY
    return {
        name: target.replace(":", ".") if ":" in target else f"{target}.{name}"
        for name, target in table.items()
    }


def defined_statically(path: str) -> bool:
    """Whether the module's source binds the name at its top level (mkdocstrings reads sources, not objects:
    a name made by a module ``__getattr__`` on first use is not there)."""
    module, _, name = path.rpartition(".")
    spec = importlib.util.find_spec(module)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    bound = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            bound.update(a.asname or a.name for a in node.names)
    return name in bound


def api_page(package: str, purpose: str, shown: set[str]) -> str:
    """A package's page: its docstring, then each public name not already shown on an earlier page (those are
    linked to where they are shown: one heading per object, so every cross-reference has one target)."""
    lines = [f"# {package}", "", purpose, "", f"::: {package}", "    options:", "      members: false"]
    lines += ["      show_root_heading: false", ""]
    elsewhere = []
    for name, path in sorted(public_names(package).items()):
        if path in shown:
            elsewhere.append(f"[`{name}`][{path}]")
        elif defined_statically(path):
            lines += [f"::: {path}", "    options:", "      heading_level: 2", ""]
            shown.add(path)
        else:
            module = path.rpartition(".")[0]
            lines += [f"## {name}", "", f"`{path}`: computed by `{module}.__getattr__` when first read.", ""]
    if elsewhere:
        lines += ["## Shown on another page", "", ", ".join(elsewhere), ""]
    return "\n".join(lines)


def generated_pages(repo_url: str) -> dict[str, str]:
    """``{page path: Markdown}`` of every page this hook adds."""
    pages = {"index.md": from_repository((REPO / "README.md").read_text(encoding="utf-8"), repo_url)}
    pages["architecture.md"] = from_repository(
        (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8"), repo_url
    )
    for name in METRICS:
        card = (REPO / "metrics" / name / "README.md").read_text(encoding="utf-8")
        pages[f"metrics/{name}.md"] = from_repository(card, repo_url, depth=1)
    shown: set[str] = set()
    for page, (package, purpose) in API_PAGES.items():
        pages[page] = api_page(package, purpose, shown)
    return pages


def on_files(files, config):
    for path, text in generated_pages(repository_url(config)).items():
        files.append(File.generated(config, path, content=text))
    return files
