"""``capeval install-modules``: a bare ``evaluate.load("<name>")`` from any directory, through evaluate's own
fallback to its module cache when the Hub has no ``evaluate-metric/<name>``.

Every load runs in a fresh process with a temporary ``HF_MODULES_CACHE`` and ``HF_HOME`` and a working
directory without a ``metrics/`` folder; "online" means ``HF_ENDPOINT`` at a local stand-in for the Hub
(:mod:`capeval_dev.perf.module_loading`); the three online answers are given, one per load, to one fresh process
whose stand-in switches answer between its loads. The times of those loads are measured by
``scripts/bench_module_loading.py``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from evaluate.loading import CachedEvaluationModuleFactory, files_to_hash

import capeval
from capeval.cli import main
from capeval.integrations.evaluate_modules import module_path
from capeval.integrations.module_cache import install_modules
from capeval.registry import METRICS
from capeval_dev.perf.module_loading import (
    child_env,
    example_inputs,
    load_in_fresh_process,
    load_per_answer_in_one_process,
    stand_in_hub,
)

STALE_HASH = "0" * 64


def _expected_module(name: str) -> str:
    # The dotted name evaluate's CachedEvaluationModuleFactory builds, with the hash evaluate computes.
    code_hash = files_to_hash([str(module_path(name) / f"{name}.py")])
    return f"evaluate_modules.metrics.evaluate-metric--{name}.{code_hash}.{name}"


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        # Lock files are rewritten by every writer, evaluate's own included; they hold nothing.
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".lock"
    }


def _as_json(value):
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The modules installed by the command (``capeval install-modules``, run here: writing the cache imports none
    of them and leaves ``sys.path`` alone); the loads that read them run in fresh processes."""
    root = tmp_path_factory.mktemp("install")
    cache, home, cwd = root / "modules", root / "home", root / "elsewhere"
    cwd.mkdir()
    assert main(["install-modules", "--modules-cache", str(cache)]) == 0
    return cache, home, cwd


def _download(root: Path, cwd: Path) -> tuple[dict, list[str]]:
    """evaluate itself downloads clipscore.py from a Hub stand-in that has it and writes its cache entry under
    ``root/modules``: what the fresh process loaded, and the requests the stand-in received."""
    source = module_path("clipscore") / "clipscore.py"
    with stand_in_hub("404", files={"clipscore.py": source.read_bytes()}) as (endpoint, seen):
        env = child_env("404", endpoint, root / "modules", root / "home")
        return load_in_fresh_process(["clipscore"], env, cwd)["clipscore"], seen


def _install_modules_at_a_dangling_link(root: Path) -> subprocess.CompletedProcess:
    """``python -m capeval.cli install-modules`` with ``HF_MODULES_CACHE`` a link to a folder that does not exist."""
    link, target = root / "modules", root / "unmounted" / "modules"
    link.symlink_to(target)
    env = child_env("offline", None, link, root / "home")
    return subprocess.run(
        [sys.executable, "-m", "capeval.cli", "install-modules"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def fresh_processes(installed, tmp_path_factory):
    """The module's fresh processes, started together once the cache is installed, two at a time (their imports
    are single-threaded: a second core runs the second); each test waits for its own (``.result()``).

    ``online``: a bare ``evaluate.load("clipscore")`` once per Hub answer, in one fresh process whose
    ``HF_ENDPOINT`` switches answer before each load: the closed port first (before any request has been answered),
    then 404, then 401; each load imports the module anew (the process forgets the modules evaluate imported from
    its cache). ``offline``: the six bare names, clipscore computed. ``download``: :func:`_download`.
    ``dangling link``: :func:`_install_modules_at_a_dangling_link`.
    """
    cache, home, cwd = installed
    assert not (cwd / "metrics").exists() and not (cwd / "clipscore").exists()
    offline = child_env("offline", None, cache, home)
    download, dangling = tmp_path_factory.mktemp("download"), tmp_path_factory.mktemp("dangling")
    pool = ThreadPoolExecutor(2)
    futures = {
        "online": pool.submit(
            load_per_answer_in_one_process, "clipscore", ["closed", "404", "401"], cache, home, cwd
        ),
        "offline": pool.submit(load_in_fresh_process, list(METRICS), offline, cwd, compute=["clipscore"]),
        "download": (download, pool.submit(_download, download, cwd)),
        "dangling link": (dangling, pool.submit(_install_modules_at_a_dangling_link, dangling)),
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow  # a fresh process importing torch (run beside the others of fresh_processes)
def test_install_writes_the_folders_evaluate_writes_when_it_downloads_a_module(installed, fresh_processes):
    cache, _, _ = installed
    root, done = fresh_processes["download"]
    downloaded, seen = done.result()
    assert any("/spaces/evaluate-metric/clipscore/" in r for r in seen)
    assert downloaded["module"] == _expected_module("clipscore")

    ours_root = cache / "evaluate_modules" / "metrics"
    theirs_root = root / "modules" / "evaluate_modules" / "metrics"
    ours, theirs = _tree(ours_root), _tree(theirs_root)
    evaluate_wrote = {k for k in theirs if "evaluate-metric--clipscore" in k or k == "__init__.py"}
    assert evaluate_wrote == {k for k in ours if "evaluate-metric--clipscore" in k or k == "__init__.py"}
    for rel in evaluate_wrote:
        if rel.endswith(".json"):
            # Where the script came from differs (their download cache, our package); the record's keys do not.
            assert json.loads(ours[rel][1]).keys() == json.loads(theirs[rel][1]).keys()
        else:
            assert ours[rel][1] == theirs[rel][1], rel


@pytest.mark.slow  # a fresh process importing torch and computing (run beside the others of fresh_processes)
def test_bare_names_load_offline_from_any_directory_and_compute(installed, fresh_processes):
    cache, _, cwd = installed
    out = fresh_processes["offline"].result()
    assert not (cwd / "metrics").exists() and not (cwd / "clipscore").exists()
    for name in METRICS:
        assert out[name]["module"] == _expected_module(name), name
        assert Path(out[name]["file"]).is_relative_to(cache), out[name]["file"]
    inputs = example_inputs("clipscore")
    plain = capeval.CLIPScore(model=inputs.pop("model"))(inputs.pop("predictions"), **inputs)
    assert out["clipscore"]["result"] == _as_json(plain)
    assert out["clipscore"]["result"]["scores"][0] > 1.0  # the shapes CLIP matches a scene to its caption


@pytest.mark.slow  # one fresh process importing torch for the three answers (beside the others of fresh_processes)
@pytest.mark.parametrize("answer", ["404", "401", "closed"])
def test_bare_name_loads_online_after_the_hub_misses_or_is_unreachable(fresh_processes, answer):
    out, seen = fresh_processes["online"].result()[answer]
    assert out["module"] == _expected_module("clipscore")
    if answer == "closed":
        assert seen == []  # nothing listened: no request was answered
    else:
        # evaluate asked the Hub first (v0.4.6, then main or the other module types), then used the cache.
        assert "HEAD /spaces/evaluate-metric/clipscore/resolve/v0.4.6/clipscore.py" in seen, seen


def test_the_command_installs_all_six_where_evaluate_looks(installed):
    cache, home, _ = installed
    for name in METRICS:
        folder = cache / "evaluate_modules" / "metrics" / f"evaluate-metric--{name}"
        assert CachedEvaluationModuleFactory(
            f"evaluate-metric--{name}", dynamic_modules_path=str(cache / "evaluate_modules")
        ).get_module().module_path == _expected_module(name)
        assert (folder / _expected_module(name).split(".")[-2] / f"{name}.py").read_bytes() == (
            module_path(name) / f"{name}.py"
        ).read_bytes()


def test_installing_twice_changes_nothing(tmp_path):
    cache = tmp_path / "modules"
    first = install_modules(modules_cache=cache)
    before = _tree(cache)
    second = install_modules(modules_cache=cache)
    assert _tree(cache) == before  # same files, same bytes, same modification times
    assert [m.status for m in first] == ["installed"] * len(METRICS)
    assert [m.status for m in second] == ["unchanged"] * len(METRICS)


def test_a_reinstall_removes_other_copies_so_evaluate_picks_the_current_code(tmp_path):
    cache = tmp_path / "modules"
    current = install_modules(["clipscore"], cache)[0]
    # Another capeval's copy, newer on disk (a downgrade, or a copy edited by hand): evaluate takes the newest file.
    stale = current.script.parents[1] / STALE_HASH
    stale.mkdir()
    (stale / "__init__.py").touch()
    (stale / "clipscore.py").write_text("# an older capeval's module\n")
    future = current.script.stat().st_mtime + 3600
    os.utime(stale / "clipscore.py", (future, future))
    dynamic = str(cache / "evaluate_modules")
    assert (
        CachedEvaluationModuleFactory("evaluate-metric--clipscore", dynamic_modules_path=dynamic)
        .get_module()
        .hash
        == STALE_HASH
    )

    again = install_modules(["clipscore"], cache)[0]
    assert (again.status, again.removed, again.hash) == ("updated", [STALE_HASH], current.hash)
    assert not stale.exists()
    picked = CachedEvaluationModuleFactory(
        "evaluate-metric--clipscore", dynamic_modules_path=dynamic
    ).get_module()
    assert picked.hash == current.hash
    assert picked.module_path == _expected_module("clipscore")


def test_unknown_metric_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"unknown metric\(s\) \['bleu'\]"):
        install_modules(["clipscore", "bleu"], tmp_path / "modules")
    assert not (tmp_path / "modules").exists()


# --- A module cache that cannot be a folder ---


def test_hf_modules_cache_at_a_dangling_link_is_one_line_naming_the_link_and_its_target(fresh_processes):
    root, done = fresh_processes["dangling link"]
    proc = done.result()
    link, target = root / "modules", root / "unmounted" / "modules"
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"capeval: error: evaluate's module cache {link}: {link} is a symbolic link to {target}, which does not "
        "exist (or is a loop of links); create its target folder, or set HF_MODULES_CACHE (or --modules-cache) "
        "to a folder"
    ]
    assert not (root / "unmounted").exists()  # the link's target is not created behind the user's back


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda root: (root / "link").symlink_to(root / "gone"),
            "{root}/link is a symbolic link to {root}/gone",
        ),
        (lambda root: (root / "link").write_text("a file"), "{root}/link is a file, not a folder"),
    ],
    ids=["under a dangling link", "under a file"],
)
def test_a_module_cache_below_a_dangling_link_or_a_file_is_refused_before_anything_is_written(
    tmp_path, capsys, make, message
):
    make(tmp_path)
    cache = tmp_path / "link" / "modules"
    assert main(["install-modules", "--modules-cache", str(cache)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"capeval: error: evaluate's module cache {cache}: {message.format(root=tmp_path)}")
    assert len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link"]
