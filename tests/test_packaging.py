"""The release: ``python -m build`` makes an sdist and, from it, a wheel that installs into a fresh venv and
carries the six evaluate modules, the demo and the shapes CLIP, so ``capeval.load`` works from anywhere.

The fresh venv gets only the wheel (``pip install --no-deps --no-index``); its heavy dependencies (torch,
transformers, evaluate...) come from this checkout's .venv through a ``.pth`` line naming that
site-packages folder. A ``.pth`` line adds the folder to ``sys.path`` without running the ``.pth`` files
inside it, so the editable install of capeval there stays invisible and ``import capeval`` can only find
the wheel. (``--system-site-packages`` would expose the system Python, which lacks the dependencies, and
installing them again would download gigabytes.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from capeval import __version__
from capeval.registry import METRICS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent

_OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PIP_NO_INDEX": "1",
}


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dists(tmp_path_factory, repo_root):
    out = tmp_path_factory.mktemp("dist")
    # Without isolation: the build backend (hatchling) comes from .venv, so building needs no network.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, repo_root])
    (sdist,) = out.glob(f"capeval-{__version__}.tar.gz")
    (wheel,) = out.glob(f"capeval-{__version__}-*.whl")
    return sdist, wheel


def test_sdist_carries_the_modules_the_spaces_and_the_package(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as tar:
        names = set(tar.getnames())
    root = f"capeval-{__version__}"
    for metric in METRICS:
        assert f"{root}/metrics/{metric}/{metric}.py" in names
        assert f"{root}/metrics/{metric}/README.md" in names
        assert f"{root}/spaces/{metric}/app.py" in names
    assert f"{root}/src/capeval/demo/builder.py" in names
    assert f"{root}/pyproject.toml" in names


def test_wheel_built_from_the_sdist_carries_the_modules_demo_and_shapes_clip(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for metric in METRICS:
        assert f"capeval/_modules/{metric}/{metric}.py" in names
        assert f"capeval/_modules/{metric}/README.md" in names
    assert "capeval/demo/builder.py" in names and "capeval/integrations/hub.py" in names
    assert "capeval/shapes/assets/shapes-clip/config.json" in names
    # what only the tests and the benchmark scripts use stays in the clone
    assert not [n for n in names if n.startswith(("capeval_dev/", "capeval/perf/"))]
    assert not [
        n
        for n in names
        if n.startswith("capeval/testing/") and not n.endswith(("__init__.py", "shapes.py", "tiny_clip.py"))
    ]
    assert not any(n.endswith((".pyc", ".pyi")) for n in names)


def test_the_wheel_stays_under_two_megabytes(dists):
    """Most of it is the shapes CLIP, whose untrained token rows are stored as zeros so they compress."""
    _, wheel = dists
    assert wheel.stat().st_size <= 2_000_000, f"wheel is {wheel.stat().st_size:,} bytes"


def _fresh_venv_with(wheel, venv, dependencies) -> tuple[Path, str]:
    """A fresh venv (no system site-packages) with the wheel installed by pip, and nothing else: this checkout's
    pip installs into it (``pip --python``), so the venv skips ensurepip's copy of pip; its dependencies are the
    packages in the folder ``dependencies`` (one ``.pth`` line). Its python and its site-packages folder."""
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([*pip, "--disable-pip-version-check", "-q", wheel], env={**env, **_OFFLINE})
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(site, "capeval_test_dependencies.pth"), "w") as fh:
        fh.write(f"{dependencies}\n")
    return py, site


def _with_every_dependency(wheel, tmp_path) -> subprocess.CompletedProcess:
    """The wheel in a fresh venv seeing this checkout's dependencies: install-modules, then every load, run
    from a folder elsewhere."""
    venv = tmp_path / "venv"
    env = {**os.environ, **_OFFLINE, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    env.pop("PYTHONPATH", None)
    py, _ = _fresh_venv_with(wheel, venv, sysconfig.get_paths()["purelib"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["HF_EVALUATE_OFFLINE"] = "1"  # evaluate reads only its own variable
    # ``capeval install-modules`` (the wheel's console script runs in the core venv below), then the loads.
    script = textwrap.dedent(
        f"""
        import capeval, evaluate
        from capeval.cli import main
        assert main(["install-modules"]) == 0
        from importlib.metadata import version
        from capeval.integrations.evaluate_modules import module_path
        from capeval.shapes import Scene, draw, shapes_clip_path
        assert capeval.__file__.startswith({str(venv)!r}), capeval.__file__
        assert version("capeval") == {__version__!r}
        for name in capeval.METRICS:
            assert str(module_path(name)).startswith({str(venv)!r}), module_path(name)
            assert isinstance(capeval.load(name), evaluate.Metric), name
        image = draw(Scene("red", "circle", "left"))
        out = capeval.load("clipscore").compute(
            predictions=["a red circle on the left", "a blue square on the right"],
            images=[image, image],
            model=str(shapes_clip_path()),
        )
        assert out["scores"][0] > out["scores"][1], out
        import inspect, json
        bare = evaluate.load("clipscore")  # evaluate's cache, where capeval install-modules put the wheel's module
        record = json.load(open(inspect.getfile(type(bare))[:-3] + ".json"))
        assert record["original file path"].startswith({str(venv)!r}), record
        assert ".evaluate-metric--clipscore." in type(bare).__module__, type(bare).__module__
        import capeval.demo
        print("OK", out["signature"])
        """
    )
    return _run([py, "-c", script], cwd=elsewhere, env=env)


def _core_dependencies(folder) -> None:
    """``folder`` filled with links to the installed files of capeval's core requirements and what they pull in
    (``scripts/bench_install.py`` follows their metadata), and nothing else: the core install, without a
    download."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_install", REPO / "scripts" / "bench_install.py")
    bench_install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_install)
    folder.mkdir()
    for dist in bench_install.closure(bench_install.declared()).values():
        for entry in bench_install.top_level_entries(dist):
            source = dist.locate_file(entry)
            if os.path.exists(source) and not (folder / entry).exists():
                (folder / entry).symlink_to(source)


def _with_the_core_alone(wheel, tmp_path) -> tuple[subprocess.CompletedProcess, ...]:
    """The wheel in a fresh venv seeing capeval's core requirements alone: the scores and refusals of the Python
    API, then ``capeval score`` and ``capeval compare`` on the example files (the README's main job)."""
    venv = tmp_path / "venv"
    _core_dependencies(tmp_path / "core")
    py, site = _fresh_venv_with(wheel, venv, tmp_path / "core")
    env = {
        **os.environ,
        **_OFFLINE,
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HF_EVALUATE_OFFLINE": "1",
    }
    env.pop("PYTHONPATH", None)
    shapes = REPO / "examples" / "shapes"
    script = textwrap.dedent(
        f"""
        import importlib.util, json
        for name in ("scipy", "gensim", "ot", "accelerate", "braceexpand", "av", "gradio", "torchmetrics"):
            assert importlib.util.find_spec(name) is None, name
        import capeval, evaluate
        from capeval.diagnostics.extras import MissingExtraError
        from capeval.integrations.evaluate_modules import module_path
        from capeval.shapes import shapes_clip_path
        assert capeval.__file__.startswith({str(venv)!r}), capeval.__file__
        model = str(shapes_clip_path())
        candidates = json.load(open({str(shapes / "candidates.json")!r}))
        ids = sorted(candidates)[:4]
        images = [{str(shapes / "images")!r} + "/" + i + ".png" for i in ids]
        captions = [candidates[i] for i in ids]
        direct = capeval.CLIPScore(model=model)(captions, images=images)["scores"]
        module = evaluate.load(str(module_path("clipscore")))
        through = module.compute(predictions=captions, images=images, model=model)["scores"]
        assert max(abs(a - b) for a, b in zip(direct, through)) < 1e-6, (direct, through)
        refused = {{}}
        calls = {{
            "text": lambda: capeval.WMD(),
            "stats": lambda: capeval.compare([0.1, 0.2], [0.2, 0.1]),
            "corpus": lambda: capeval.score_corpus("rows.jsonl", "out", model=model),
            "torchmetrics": lambda: __import__("capeval.torchmetrics").torchmetrics.CLIPScore,
            "spaces": lambda: __import__("capeval.demo").demo.build_demo,
            "bench": lambda: __import__("capeval.bench").bench.run_benchmark,
        }}
        for extra, call in calls.items():
            try:
                call()
            except MissingExtraError as err:
                refused[extra] = str(err)
        for extra in calls:
            assert f'pip install "capeval[{{extra}}]"' in refused.get(extra, ""), (extra, refused)
        print("OK", len(direct))
        """
    )
    done = _run([py, "-c", script], cwd=tmp_path, env=env)
    capeval = venv / "bin" / "capeval"
    files = ["--references-json", shapes / "references.json", "--save-per-instance", tmp_path / "scores.json"]
    model = ["--model", Path(site) / "capeval" / "shapes" / "assets" / "shapes-clip"]
    scored = _run([capeval, "score", shapes / "candidates.json", shapes / "images", *files, *model], env=env)
    both = [str(tmp_path / "scores.json")] * 2
    compared = subprocess.run([str(capeval), "compare", *both], capture_output=True, text=True, env=env)
    return done, scored, compared


@pytest.fixture(scope="module")
def fresh_venvs(dists, tmp_path_factory):
    """The two fresh venvs with the wheel (every dependency; the core alone), made and run together, each in a
    thread of its own (their processes' imports are single-threaded: a second core runs the second); each test
    waits for its own (``.result()``)."""
    _, wheel = dists
    pool = ThreadPoolExecutor(2)
    yield {
        "every dependency": pool.submit(_with_every_dependency, wheel, tmp_path_factory.mktemp("every")),
        "core alone": pool.submit(_with_the_core_alone, wheel, tmp_path_factory.mktemp("core")),
    }
    pool.shutdown(wait=True, cancel_futures=True)


def test_wheel_installs_in_a_fresh_venv_and_loads_every_metric_from_elsewhere(fresh_venvs):
    done = fresh_venvs["every dependency"].result()
    assert "OK clipscore|" in done.stdout


def test_the_wheel_with_the_core_requirements_alone_scores_the_clip_metrics_and_names_each_missing_extra(
    fresh_venvs,
):
    done, scored, compared = fresh_venvs["core alone"].result()
    assert "OK 4" in done.stdout
    # the README's main job: the command line on the example files, the core alone
    assert "refclipscore" in scored.stdout.lower()
    assert compared.returncode == 2
    assert 'capeval compare needs capeval[stats]: pip install "capeval[stats]"' in compared.stderr
