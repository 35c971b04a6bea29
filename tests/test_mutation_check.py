"""scripts/mutation_check.py: every listed one-line mutation of a formula, protocol or text step fails its tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


def _script(repo_root):
    spec = importlib.util.spec_from_file_location(
        "mutation_check", repo_root / "scripts" / "mutation_check.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutation_names_text_found_once_and_existing_tests(repo_root):
    script = _script(repo_root)
    assert len(script.MUTATIONS) >= 20
    assert len({m.name for m in script.MUTATIONS}) == len(script.MUTATIONS)
    for m in script.MUTATIONS:
        text = (repo_root / "src" / "capeval" / m.path).read_text(encoding="utf-8")
        assert text.count(m.original) == 1, (m.name, m.path)
        assert m.original != m.replacement
        for node in m.tests:
            path, _, name = node.partition("::")
            assert f"def {name}(" in (repo_root / path).read_text(encoding="utf-8"), (m.name, node)


@pytest.mark.slow
def test_no_mutation_survives_its_tests(repo_root):
    proc = subprocess.run(
        # The suite runs every selected test unmutated anyway, so the script's own baseline run is skipped.
        [sys.executable, str(repo_root / "scripts" / "mutation_check.py"), "--no-baseline"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "mutations killed" in proc.stdout
