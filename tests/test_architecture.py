"""The package's layers, as ARCHITECTURE.md draws them: every import of every module (those inside functions
included) is walked; there is no cycle and no arrow from a lower wing up to a higher one."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import capeval

PACKAGE = Path(capeval.__file__).resolve().parent
REPO = PACKAGE.parents[1]

# The modules directly under capeval/ that hold the metrics, their maths and what every metric shares.
METRIC_MODULES = {"clipscore", "pacscore", "emscore", "emscore_matching", "wmd", "wembsim", "scores"}
METRIC_MODULES |= {"signature", "validation", "registry", "json_files"}
# Which wings each wing may import (its own included). Lower wings never import higher ones.
MAY_IMPORT = {
    "clip": {"clip"},
    "text": {"text"},
    "metrics": {"metrics", "clip", "text"},
    "corpus": {"corpus", "metrics", "clip", "text"},
    "shapes": {"shapes", "clip", "metrics"},
    "testing": {"testing", "shapes"},  # the former import path of the shapes world, nothing else imports it
    "training": {"training", "shapes", "metrics", "clip"},
    "significance": {"significance", "metrics"},
    "bench": {"bench", "scoring", "significance", "corpus", "metrics", "clip", "text"},
    "integrations": {"integrations", "corpus", "metrics", "clip", "text"},
    "torchmetrics": {"torchmetrics", "metrics", "clip", "text"},
    "demo": {"demo", "integrations", "shapes", "metrics", "clip", "text"},
    "scoring": {"scoring", "significance", "corpus", "metrics", "clip", "text"},
    "cli": {"cli", "scoring", "significance", "bench", "corpus", "integrations", "metrics", "clip", "text"},
}
# diagnostics (the warning categories and run summaries) sits below every wing: any wing may import it.
MAY_IMPORT["diagnostics"] = {"diagnostics"}
for _allowed in MAY_IMPORT.values():
    _allowed.add("diagnostics")
EXEMPT = {"capeval", "capeval._lazy"}  # the lazy package roots: they import no capeval module statically


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def wing(module: str) -> str:
    parts = module.split(".")
    if module in EXEMPT:
        return "root"
    if len(parts) == 2 and parts[1] in METRIC_MODULES:
        return "metrics"
    return parts[1]


def _resolve(current: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = current if MODULES[current].name == "__init__.py" else current.rsplit(".", 1)[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imports_of(module: str) -> set[str]:
    """The capeval modules ``module`` imports anywhere in its body (``from X import y``: ``X.y`` when it is a
    module, else ``X``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found |= {n for n in names if n in MODULES}
    return found - {module}


GRAPH = {m: imports_of(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_anywhere_in_the_package():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle_through_function_level_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_arrows_only_point_down_between_wings():
    upward = [
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        if m not in EXEMPT
        for t in targets
        if t not in EXEMPT and wing(t) not in MAY_IMPORT[wing(m)]
    ]
    assert upward == []


def test_the_clip_engine_imports_nothing_outside_itself():
    clip = {m: t for m, t in GRAPH.items() if wing(m) == "clip"}
    assert len(clip) >= 10
    assert {
        t for targets in clip.values() for t in targets if wing(t) not in ("clip", "diagnostics")
    } <= EXEMPT


def test_every_module_belongs_to_a_wing():
    assert {wing(m) for m in MODULES} - {"root"} <= set(MAY_IMPORT)
    assert {m for m in MODULES if wing(m) == "root"} == EXEMPT


def test_the_top_level_holds_at_most_14_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 14, top


def test_metric_scripts_use_only_what_capeval_exports_at_its_top_level():
    public = set(dir(capeval))
    for script in sorted(REPO.glob("metrics/*/*.py")):
        tree = ast.parse(script.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("capeval"), f"{script.name}: from {node.module}"
            if isinstance(node, ast.Import):
                assert all(a.name == "capeval" or not a.name.startswith("capeval") for a in node.names)
        used = {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "capeval"
        }
        assert used and used <= public, (script.name, used - public)


# --- What a fresh interpreter sees: one process, started as the module starts, answers the checks below that read
# it, in this order (the bare import first, before anything loads torch; the first imports of every module last,
# as they drop capeval from sys.modules) ---

_FRESH_PROCESS = """
import importlib, importlib.util, json, sys

out = {}
import capeval

dir(capeval)
out["heavy_after_bare_import"] = sorted(m for m in ("torch", "transformers") if m in sys.modules)
spec = importlib.util.find_spec("capeval.torchmetrics")
out["torchmetrics_spec"] = [spec.name, spec.origin.endswith("torchmetrics/__init__.py"), "torch" in sys.modules]
out["subpackages"] = [
    callable(capeval.bench.run_benchmark) and capeval.scores.W_CLIP_S == 2.5,
    capeval.clip.encode_images is capeval.encode_images,
]
out["missing"] = []
for name in ("nonexistent", "backbones"):
    try:
        getattr(capeval, name)
    except AttributeError as err:
        out["missing"].append(str(err))
failed = []
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "capeval" or m.startswith("capeval.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as err:
        failed.append(f"{name}: {err}")
out["failed_first_imports"] = failed
print(json.dumps(out))
"""


@pytest.fixture(scope="module", autouse=True)
def _fresh_process_started(tmp_path_factory):
    """``_FRESH_PROCESS`` started in a new Python process as the module starts, so that it runs while the tests
    before its first reader run here (on another core); its output goes to files, which a full pipe cannot stall."""
    names = json.dumps(sorted(m for m in MODULES if m not in EXEMPT))
    folder = tmp_path_factory.mktemp("fresh-process")
    with open(folder / "stdout", "w+") as out, open(folder / "stderr", "w+") as err:
        with subprocess.Popen([sys.executable, "-c", _FRESH_PROCESS, names], stdout=out, stderr=err) as proc:
            yield proc, out, err


@pytest.fixture(scope="module")
def fresh_process(_fresh_process_started) -> dict:
    """What ``_FRESH_PROCESS`` found in a new Python process."""
    proc, out, err = _fresh_process_started
    proc.wait()
    out.seek(0)
    err.seek(0)
    assert proc.returncode == 0, err.read()
    return json.loads(out.read().strip().splitlines()[-1])


def test_the_public_api_of_the_readme_resolves():
    names = ("CLIPScore", "RefCLIPScore", "PACScore", "EMScore", "WMD", "WEmbSim", "load", "encode_images")
    assert all(callable(getattr(capeval, name)) for name in names)
    assert capeval.METRICS == ("clipscore", "refclipscore", "pacscore", "wembsim", "wmd", "emscore")
    # Hessel et al. 2021, sec. 3 (w = 2.5, the prompt); Sarto et al. 2023, sec. 4 (w = 2.0).
    assert capeval.W_CLIP_S == 2.5 and capeval.W_PAC_S == 2.0 and capeval.PREFIX == "A photo depicts"


# --- The public surface: what the docs document, nothing else ---


def documented_python_api() -> list[str]:
    """The names in the first column of the table of docs/reference/python-api.md."""
    text = (REPO / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"^\| `(\w+)`", text, flags=re.M)]


def test_all_is_exactly_the_python_api_the_docs_document():
    documented = documented_python_api()
    assert len(documented) == len(set(documented)) >= 6
    assert sorted(documented) == sorted(capeval.__all__)


def test_dir_of_the_package_is_its_public_names_and_dunders_only():
    names = dir(capeval)
    assert names == sorted(names)
    assert [n for n in names if not n.startswith("__")] == sorted(capeval.__all__)
    assert {"sys", "importlib", "import_module", "lazy_exports", "annotations"}.isdisjoint(names)


def test_every_package_face_imports_its_names_on_first_use():
    # One style of package face: the public names are a table for capeval._lazy, imported when first asked for,
    # so importing a package (or any module in it) imports no other module of the package.
    eager = {}
    for module, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        rest = sorted(GRAPH[module] - {"capeval._lazy"}) + defined
        if rest:
            eager[module] = rest
    assert eager == {}


def test_every_public_name_resolves_from_a_bare_import():
    assert [name for name in capeval.__all__ if not hasattr(capeval, name)] == []
    with pytest.raises(AttributeError, match="has no attribute 'NotAName'"):
        capeval.NotAName  # noqa: B018


def test_subpackages_are_attributes_of_the_package_after_a_bare_import(fresh_process):
    assert fresh_process["subpackages"] == [True, True]
    assert "has no attribute 'nonexistent'" in fresh_process["missing"][0]
    # a path of an unreleased layout: gone, not aliased
    assert "has no attribute 'backbones'" in fresh_process["missing"][1]


def test_importing_capeval_loads_no_torch(fresh_process):
    assert fresh_process["heavy_after_bare_import"] == []


@pytest.mark.parametrize(
    "path", ["capeval.backbones", "capeval.encoding", "capeval.distributed", "capeval.text.wmd"]
)
def test_module_paths_of_an_unreleased_layout_do_not_import(path):
    with pytest.raises(ModuleNotFoundError, match=path.replace(".", r"\.")):
        importlib.import_module(path)


def test_the_package_installs_no_import_hook():
    assert not [f for f in sys.meta_path if type(f).__module__.startswith("capeval")]


def test_capeval_torchmetrics_is_a_real_module_not_an_alias(fresh_process):
    assert fresh_process["torchmetrics_spec"] == ["capeval.torchmetrics", True, False]


def test_every_module_imports_first_in_a_fresh_package(fresh_process):
    """Each module imported before any other capeval module: a cycle that runs through a package's ``__init__``
    (which the static walk does not count) fails here as a partially initialised module."""
    assert fresh_process["failed_first_imports"] == []
