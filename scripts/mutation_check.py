"""One-line mutations of capeval's formulas, protocols and text pre-processing, each of which the suite must catch.

Each mutation replaces one exact piece of one source line in a temporary copy of ``src/`` and runs only the tests
that concern it (``pytest -x -q <node ids>`` with capeval imported from the copy, in a child forked from this
process once the heavy libraries are loaded: Linux; one child per core at a time, each in its own copy). A
mutation the tests do not fail on "survived"; an original text no longer found in its file is "stale" (the list must follow the code).
The tests of every mutation first run once on the unmutated copy, so a kill is never a test that fails anyway
(``--no-baseline`` skips that where the suite runs them anyway: tests/test_mutation_check.py).

    python scripts/mutation_check.py            # all mutations, a table, exit 1 if any survives or is stale
    python scripts/mutation_check.py -k prefix  # the mutations whose name contains "prefix"
    python scripts/mutation_check.py --list     # the table of mutations and the tests that catch them
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to src/capeval
    original: str  # must occur exactly once in the file
    replacement: str
    tests: tuple[str, ...]  # pytest node ids, relative to the repository root
    description: str


T_NEG = "tests/test_negative_reference_cosine.py::test_a_negative_best_reference_cosine_is_kept_by_default_and_clipped_on_request"
T_METHOD_A = (
    "tests/test_bench_runner.py::test_flickr8k_expert_is_scored_with_method_a_one_row_per_expert_rating"
)
T_CLEAN = "tests/test_tokenization.py::test_cleaning_matches_the_authors_basic_and_whitespace_clean"
T_PUNCT = "tests/test_wmd_tokenize.py::test_coco_tokens_drop_every_mark_of_the_toolkit_list"
T_PUNCT_JAR = "tests/test_wmd_tokenize_jar.py::test_coco_punctuation_list_equals_the_toolkit_source"
T_PIPE = (
    "tests/test_perf_pipelines.py::test_both_pipelines_equal_the_independent_restatement_of_the_authors_code"
)
T_CLIP_S = "tests/test_clipscore.py::test_clipscore_equals_the_authors_formula_per_sample"
T_REF_CLIP_S = "tests/test_clipscore.py::test_refclipscore_equals_the_authors_formula_per_sample"
T_PAC_S = "tests/test_pacscore.py::test_pacscore_and_refpacscore_equal_the_authors_recipe_on_their_model"
T_WMD_HAND = "tests/test_wmd.py::test_wmd_matches_hand_computed_transport_costs"
T_WMD_BEST = "tests/test_wmd.py::test_best_reference_is_kept_and_sigma_scales_the_distance"
T_STOPWORDS = "tests/test_wmd_tokenize.py::test_stopwords_equal_the_coco_toolkit_file"
T_PTB = "tests/test_wmd_tokenize.py::test_ptb_tokenize_matches_the_stanford_tokenizer_of_the_coco_toolkit"
T_TAU = "tests/test_bench_statistics.py::test_tau_c_and_tau_b_differ_on_tied_ratings_as_worked_by_hand"
T_EXPERT_DROP = "tests/test_bench_protocols.py::test_expert_protocol_drops_pairs_whose_candidate_is_a_reference_of_its_image"
T_DRAWS = "tests/test_bench_protocols.py::test_pascal_defaults_are_five_draws_of_five_references"
T_PIXELS = "tests/test_images.py::test_pixels_equal_the_authors_transform_on_odd_sizes_and_modes"
T_IDF = "tests/test_emscore.py::test_idf_counts_real_tokens_only_and_weights_end_of_text_by_the_mean"
T_EMS_REF = "tests/test_emscore.py::test_reference_only_emscore_equals_the_formulas_per_sample"
T_EMS_VIDEO = "tests/test_emscore.py::test_video_only_emscore_equals_the_formulas_per_sample"
T_WEMBSIM = "tests/test_wembsim.py::test_wembsim_is_the_cosine_of_mean_word_vectors_as_gensim_n_similarity"
T_WEMBSIM_ABS = "tests/test_wembsim.py::test_cosine_is_absolute_as_in_eq_2_by_default_and_signed_on_request"
T_TRUNC = "tests/test_tokenization.py::test_truncated_captions_keep_end_of_text_and_are_counted"

MUTATIONS: tuple[Mutation, ...] = (
    # ---- CLIP-S family: formulas and defaults
    Mutation(
        "refclip-default-clips-reference-cosine",
        "clipscore.py",
        "clip_reference_cosine: bool = False",
        "clip_reference_cosine: bool = True",
        (T_NEG,),
        "RefCLIPScore clips the best-reference cosine by default (the authors' code does not)",
    ),
    Mutation("w-clip-s", "scores.py", "W_CLIP_S = 2.5", "W_CLIP_S = 2.0", (T_CLIP_S,), "CLIP-S weight 2.0"),
    Mutation("w-pac-s", "scores.py", "W_PAC_S = 2.0", "W_PAC_S = 2.5", (T_PAC_S,), "PAC-S weight 2.5"),
    Mutation(
        "clip-s-unclipped",
        "scores.py",
        "return w * raw_cosine(image_emb, text_emb).clamp(min=0)",
        "return w * raw_cosine(image_emb, text_emb)",
        (T_CLIP_S,),
        "CLIP-S without max(cos, 0)",
    ),
    Mutation(
        "harmonic-mean-halved",
        "scores.py",
        "2 * a * b / safe",
        "a * b / safe",
        (T_REF_CLIP_S,),
        "RefCLIP-S harmonic mean without its factor 2",
    ),
    # ---- CLIP pre-processing
    Mutation(
        "prompt-prefix-dropped",
        "clip/tokenization.py",
        'PREFIX = "A photo depicts"',
        'PREFIX = ""',
        (T_CLIP_S, T_PIPE),
        "no prompt prefix by default",
    ),
    Mutation(
        "bilinear-resize",
        "clip/images.py",
        "img = img.resize((new_w, new_h), Image.BICUBIC)",
        "img = img.resize((new_w, new_h), Image.BILINEAR)",
        (T_PIXELS, T_PIPE),
        "bilinear instead of bicubic resizing",
    ),
    Mutation(
        "centre-crop-floor",
        "clip/images.py",
        "left = int(round((new_w - size) / 2.0))",
        "left = (new_w - size) // 2",
        (T_PIXELS,),
        "centre crop offset floored instead of rounded",
    ),
    Mutation(
        "openai-mean",
        "clip/image_constants.py",
        "OPENAI_IMAGE_MEAN = (0.48145466,",
        "OPENAI_IMAGE_MEAN = (0.5,",
        (T_CLIP_S,),
        "OpenAI image mean's red channel 0.5",
    ),
    Mutation(
        "single-html-unescape",
        "clip/tokenization.py",
        "html.unescape(html.unescape(text))",
        "html.unescape(text)",
        (T_CLEAN,),
        "one html.unescape instead of the authors' two",
    ),
    Mutation(
        "truncation-drops-eos",
        "clip/tokenization.py",
        "            ids[-1] = eos\n",
        "",
        (T_TRUNC,),
        "captions over 77 tokens cut without their end-of-text token",
    ),
    # ---- WMD / WEmbSim text pre-processing and formulas
    Mutation(
        "semicolon-not-punctuation",
        "text/tokenize.py",
        '"...", ";"]',
        '"..."]',
        (T_PUNCT, T_PUNCT_JAR),
        "';' removed from the COCO punctuation list",
    ),
    Mutation(
        "ptb-not-lowercased",
        "text/tokenize.py",
        "return [t.lower() for t in tokens]",
        "return tokens",
        (T_PTB,),
        "PTB tokens not lower-cased",
    ),
    Mutation(
        "ptb-number-comma-split",
        "text/tokenize.py",
        r'_NUMBER = re.compile(r"\d*(?:[.,:]\d+)+|\d+")',
        r'_NUMBER = re.compile(r"\d*(?:[.:]\d+)+|\d+")',
        (T_PTB,),
        "'1,000' split at its comma",
    ),
    Mutation(
        "ptb-no-nt-clitic",
        "text/tokenize.py",
        "(n't|'s|'m|'d|'re|'ve|'ll)$",
        "('s|'m|'d|'re|'ve|'ll)$",
        (T_PTB,),
        '"n\'t" not split off',
    ),
    Mutation(
        "stopword-dropped",
        "text/stopwords.py",
        '"i me my myself',
        '"me my myself',
        (T_STOPWORDS,),
        "'i' missing from the toolkit's stopwords",
    ),
    Mutation("wmd-sigma", "wmd.py", "SIGMA = 1.0", "SIGMA = 2.0", (T_WMD_BEST,), "WMD sigma 2"),
    Mutation(
        "wmd-uniform-nbow",
        "text/documents.py",
        "weights.append(count / length)",
        "weights.append(1 / len(bag))",
        (T_WMD_HAND,),
        "nBOW weights per distinct word instead of count / length",
    ),
    Mutation(
        "wembsim-max-reduction",
        "wembsim.py",
        'REDUCTION = "mean"',
        'REDUCTION = "max"',
        (T_WEMBSIM,),
        "WEmbSim takes the best reference instead of the mean",
    ),
    Mutation(
        "wembsim-signed-cosine",
        "scores.py",
        "return np.abs(cosines) if absolute else cosines",
        "return cosines",
        (T_WEMBSIM_ABS,),
        "WEmbSim's |cos| (eq. 2) replaced by the signed cosine",
    ),
    # ---- EMScore
    Mutation(
        "emscore-idf-smoothing",
        "emscore_matching.py",
        "math.log((n + 1) / (c + 1))",
        "math.log((n + 1) / c)",
        (T_IDF,),
        "IDF without the +1 of the document frequency",
    ),
    Mutation(
        "emscore-eos-idf-zero",
        "emscore_matching.py",
        "values[eos_id] = sum(values.values()) / len(values)",
        "values[eos_id] = 0.0",
        (T_IDF,),
        "end-of-text weight 0 instead of the mean IDF",
    ),
    Mutation(
        "emscore-full-without-coarse",
        "emscore_matching.py",
        '"full_F": (figr_f + cogr) / 2,',
        '"full_F": figr_f,',
        (T_EMS_REF,),
        "full F without the coarse-grained half",
    ),
    Mutation(
        "emscore-first-frame",
        "emscore_matching.py",
        "F.normalize(frames.float().mean(dim=0), dim=-1)",
        "F.normalize(frames.float()[0], dim=-1)",
        (T_EMS_VIDEO,),
        "video embedding = first frame instead of the mean of frames",
    ),
    # ---- benchmarks: protocols and statistics
    Mutation(
        "expert-method-b",
        "bench/rating_benchmarks.py",
        'out = P.rating_correlations(s, ds, "A", ("kendall_c", "kendall_b"))',
        'out = P.rating_correlations(s, ds, "B", ("kendall_c", "kendall_b"))',
        (T_METHOD_A,),
        "Flickr8k-Expert scored with method B instead of A",
    ),
    Mutation(
        "kendall-always-b",
        "bench/statistics.py",
        "stats.kendalltau(x, y, variant=variant)",
        'stats.kendalltau(x, y, variant="b")',
        (T_TAU,),
        "tau-c computed as tau-b",
    ),
    Mutation(
        "expert-keeps-own-references",
        "bench/protocols.py",
        'enumerate(ds["candidate_in_references"]) if not flag]',
        'enumerate(ds["candidate_in_references"])]',
        (T_EXPERT_DROP,),
        "Flickr8k-Expert pairs whose candidate is a reference of its image are kept",
    ),
    Mutation(
        "pascal-four-references",
        "bench/protocols.py",
        "PASCAL_N_REFS = 5",
        "PASCAL_N_REFS = 4",
        (T_DRAWS,),
        "Pascal-50S with 4 references per pair",
    ),
)


def _copy_src(tmp: Path) -> Path:
    dest = tmp / "src"
    shutil.copytree(REPO / "src", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return dest


# What the mutations' tests import besides capeval and the tests' own modules: imported once here, so that each
# mutation's run, forked from this process, starts with them loaded (most of a fresh interpreter's start-up and of
# pytest's own start, its plugins included) and imports only capeval, from the mutated copy, and the test modules.
# This process never imports capeval.
PRELOADED = (
    "numpy",
    "PIL.Image",
    "torch",
    "transformers",
    "pytest",
    "scipy.stats",
    "sklearn.metrics",
    "pandas",
    "pyarrow",
    "datasets",
    "gensim.models",
    "ot",
    "av",
    "ftfy",
)


def _preload() -> None:
    import gc
    import importlib
    import importlib.metadata

    for name in PRELOADED:
        importlib.import_module(name)
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizerFast  # noqa: F401 - transformers loads lazily

    for plugin in importlib.metadata.entry_points(group="pytest11"):  # what pytest.main loads in every child
        importlib.import_module(plugin.module)
    if "capeval" in sys.modules:
        raise SystemExit(
            "mutation_check must not import capeval itself: the mutated copy would not be the one run"
        )
    # What is loaded now lives as long as every child: out of the collector's sight, pytest's collections at exit
    # do not walk it in each child (half a second each), and the pages stay shared after the fork.
    gc.collect()
    gc.freeze()


def _drop_bytecode(source: Path) -> None:
    """Remove the cached bytecode of ``source``: a mutation may keep the file's size and be written within the
    second of the previous version, and Python would then run the stale bytecode."""
    import importlib.util

    Path(importlib.util.cache_from_source(str(source))).unlink(missing_ok=True)


def _fork_pytest(src: Path, tests: tuple[str, ...], out) -> int:
    """Fork a child that runs ``pytest -x -q <tests>`` with capeval imported from ``src``, writing to ``out``; its
    pid."""
    pid = os.fork()
    if pid == 0:  # the child: capeval and the tests' own modules are imported here, afresh
        code = 3
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            sys.path[:0] = [str(src), str(REPO)]  # as `python -m pytest` from the repository: tests.* imports
            os.environ["PYTHONPATH"] = str(src)  # for the processes a test starts
            os.chdir(REPO)
            import pytest

            code = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]))
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _last_line(out) -> str:
    out.seek(0)
    lines = [line for line in out.read().decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass
class _Child:
    """A forked pytest run: which mutation (None for the baseline), in which copy of src/, since when."""

    mutation: Mutation | None
    src: Path
    out: object
    start: float
    deadline: float
    restore: tuple[Path, str] | None  # the mutated file and its original text


def _wait_any(children: dict[int, _Child]) -> tuple[_Child, int, str]:
    """Wait for one child to end, killing any that runs past its deadline; that child, its exit code (-1 when
    killed) and its last line of output."""
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid in children:
            child = children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            return child, code, _last_line(child.out)
        now = time.monotonic()
        for pid, child in list(children.items()):
            if now > child.deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return children.pop(pid), -1, "timed out"
        time.sleep(0.05)


def run(
    mutations: tuple[Mutation, ...], timeout: float = 300, baseline: bool = True, jobs: int = 1
) -> list[tuple[Mutation, str, float, str]]:
    """Apply each mutation in a temporary copy of src/ and run its tests, ``jobs`` mutations at a time (one copy
    of src/ each); one row per mutation, in the order given."""
    rows: dict[str, tuple[Mutation, str, float, str]] = {}
    _preload()
    with tempfile.TemporaryDirectory(prefix="capeval-mutation-") as tmp:
        copies = [_copy_src(Path(tmp) / str(i)) for i in range(max(1, jobs))]
        for src in copies:
            origin = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import importlib.util; print(importlib.util.find_spec('capeval').origin)",
                ],
                env={**os.environ, "PYTHONPATH": str(src)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if not origin.startswith(str(src)):
                raise SystemExit(f"the copy is not the capeval that runs: {origin}")
        children: dict[int, _Child] = {}
        if baseline:
            with tempfile.TemporaryFile() as out:
                every = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
                now = time.monotonic()
                children[_fork_pytest(copies[0], every, out)] = _Child(
                    None, copies[0], out, now, now + 4 * timeout, None
                )
                _, code, tail = _wait_any(children)
            if code != 0:
                raise SystemExit(f"the tests fail without any mutation ({tail}); fix them first")
        pending = list(mutations)
        free = list(copies)
        while pending or children:
            while pending and free:
                m = pending.pop(0)
                target = free[-1] / "capeval" / m.path
                text = target.read_text(encoding="utf-8")
                count = text.count(m.original)
                if count != 1:
                    rows[m.name] = (m, "stale", 0.0, f"original found {count} times in src/capeval/{m.path}")
                    continue
                src = free.pop()
                target.write_text(text.replace(m.original, m.replacement), encoding="utf-8")
                _drop_bytecode(target)
                out = tempfile.TemporaryFile()
                now = time.monotonic()
                children[_fork_pytest(src, m.tests, out)] = _Child(
                    m, src, out, now, now + timeout, (target, text)
                )
            if not children:
                break
            child, code, tail = _wait_any(children)
            child.out.close()
            target, text = child.restore
            target.write_text(text, encoding="utf-8")
            _drop_bytecode(target)
            free.append(child.src)
            m, seconds = child.mutation, time.monotonic() - child.start
            status = "killed" if code not in (0, 5) else "survived"
            rows[m.name] = (m, status, seconds, tail)
            print(f"{status:9} {seconds:6.1f}s  {m.name}: {tail}", flush=True)
    return [rows[m.name] for m in mutations]


def table(rows) -> str:
    out = ["| mutation | file | status | seconds | test that catches it |", "|---|---|---|---|---|"]
    for m, status, seconds, _ in rows:
        tests = "<br>".join(t.replace("tests/", "") for t in m.tests)
        out.append(f"| {m.description} (`{m.name}`) | {m.path} | {status} | {seconds:.0f} | {tests} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-k", default="", help="only the mutations whose name contains this text")
    parser.add_argument(
        "--list", action="store_true", help="print the mutations and their tests, run nothing"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutation")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="mutations tested at a time, each in its own copy of src/ (default: one per core)",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run of the tests (when the suite runs them anyway, as in CI)",
    )
    args = parser.parse_args(argv)
    chosen = tuple(m for m in MUTATIONS if args.k in m.name)
    if not chosen:
        parser.error(f"no mutation name contains {args.k!r}")
    if args.list:
        print(table([(m, "-", 0.0, "") for m in chosen]))
        return 0
    start = time.perf_counter()
    rows = run(chosen, timeout=args.timeout, baseline=not args.no_baseline, jobs=args.jobs)
    print()
    print(table(rows))
    bad = [(m.name, status, tail) for m, status, _, tail in rows if status != "killed"]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} mutations killed in {time.perf_counter() - start:.0f} s")
    for name, status, tail in bad:
        print(f"{status.upper()}: {name} ({tail})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
