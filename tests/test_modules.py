"""Every evaluate module: loads offline the documented ways, runs its own examples, follows the card layout."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import capeval
from capeval.integrations.evaluate_modules import module_path
from capeval.registry import METRICS

REPO = Path(__file__).resolve().parents[1]
PRESENT = [m for m in METRICS if (REPO / "metrics" / m / f"{m}.py").is_file()]
CARD_SECTIONS = [
    "## Metric Description",
    "## How to Use",
    "### Inputs",
    "### Output Values",
    "### Values from Popular Papers",
    "### Examples",
    "## Limitations and Bias",
    "## Citation",
    "## Further References",
]


def _kwargs_description(name: str) -> str:
    source = (REPO / "metrics" / name / f"{name}.py").read_text()
    match = re.search(r'_KWARGS_DESCRIPTION = """(.*?)"""', source, re.S)
    assert match, f"{name}.py has no _KWARGS_DESCRIPTION"
    return match.group(1)


@pytest.mark.parametrize("name", PRESENT)
def test_module_examples_run(name, monkeypatch):
    monkeypatch.chdir(REPO)
    text = _kwargs_description(name)
    test = doctest.DocTestParser().get_doctest(text, {}, f"{name}._KWARGS_DESCRIPTION", None, 0)
    assert test.examples, f"{name} has no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, f"{runner.failures} example(s) of {name} failed"


@pytest.mark.parametrize("name", PRESENT)
def test_module_script_follows_evaluate_import_rules(name):
    source = (REPO / "metrics" / name / f"{name}.py").read_text()
    for line in source.splitlines():
        if re.match(r"^(import|from) ", line):
            # evaluate reads trailing comments as download URLs and "import a, b" as one missing package.
            assert "#" not in line, f"{name}.py: comment on import line: {line}"
            assert "," not in line.split(" import ")[0] and not re.match(r"^import .*,", line), line
    code = re.sub(r'"""(.*?)"""', "", source, flags=re.S)
    assert not re.search(r"\b(torch|np|numpy|math)\.", code), f"{name}.py must not hold tensor maths"
    for required in ("_CITATION", "_DESCRIPTION", "_KWARGS_DESCRIPTION"):
        assert required in source


@pytest.mark.parametrize("name", PRESENT)
def test_metric_card_has_evaluate_sections_and_space_front_matter(name):
    card = (REPO / "metrics" / name / "README.md").read_text()
    assert card.startswith("---\n"), "the card carries the Space front matter"
    front = card.split("---\n")[1]
    for key in ("title:", "sdk: gradio", "app_file: app.py", "tags:"):
        assert key in front, f"{name} card front matter lacks {key}"
    positions = [card.find(s) for s in CARD_SECTIONS]
    assert all(p >= 0 for p in positions), dict(zip(CARD_SECTIONS, positions, strict=True))
    assert positions == sorted(positions), "sections out of evaluate's order"
    assert (REPO / "metrics" / name / "requirements.txt").is_file()


@pytest.mark.parametrize("name", PRESENT)
def test_module_loads_from_the_repo_root_and_from_inside_metrics(name, monkeypatch):
    import evaluate

    monkeypatch.chdir(REPO)
    assert isinstance(evaluate.load(f"metrics/{name}"), evaluate.Metric)
    monkeypatch.chdir(REPO / "metrics")
    assert isinstance(evaluate.load(name), evaluate.Metric)


def test_package_helper_loads_modules_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import evaluate

    for name in PRESENT:
        module = capeval.load(name)
        assert isinstance(module, evaluate.Metric)
        assert module.info.description.strip()
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        capeval.load("bleu")


def test_module_path_points_at_the_packaged_or_repo_folder():
    assert module_path("clipscore").name == "clipscore"
    assert (module_path("clipscore") / "clipscore.py").is_file()
