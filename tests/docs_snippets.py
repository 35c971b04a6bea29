"""The code blocks of the README, the docs and the metric cards, as CI runs them.

A block is run as written, in a fresh folder of its own (``sandbox``) that holds the repository's ``examples/``,
``metrics/``, ``src/``, ``scripts/`` and ``spaces/`` and nothing else: a file an example reads that the
repository does not hold, the page makes in a step the reader sees (a block before it, marked ``continued``).
The one exception is data a reader must download, which the page says where to get: ``bench-data``. The
comment right before a block (``<!-- snippet: WORD ... -->``, invisible on every rendered page) says what else
CI does with it; ``MARKERS`` is the whole vocabulary, and docs/development.md explains it to writers.

Printed output shown in the docs is checked: the comment lines right after a top-level statement that prints in a
Python block, the lines after each ``$ command`` of a ``console`` block, a ``text`` block marked ``output``
(what the block before it prints) and the ``>>>`` examples of a ``pycon`` block; ``...`` matches anything.

    python tests/docs_snippets.py       # how many blocks run, are substituted (and why) or are not programs
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Every word a marker may hold, and what CI does with a block that carries it.
MARKERS = {
    # not programs
    "output": "a text block: what the block before it prints; compared with what that block printed",
    "layout": "not a program: a file layout, a diagram or settings shown for reading",
    "citation": "not a program: a BibTeX entry",
    # substitutions: the block runs, with what the marker names standing in for what CI cannot have
    "hub-model": "needs openai/clip-vit-base-patch32 from the Hub: CI serves the shapes CLIP's files under that "
    "name from a stand-in Hugging Face cache (numbers shown for such blocks are not the real model's)",
    "word2vec": "needs fse/word2vec-google-news-300 from the Hub: CI passes the packaged glove-6b-50d instead",
    "pacs-weights": "needs the PAC-S authors' checkpoint (clip_ViT-B-32.pth): CI passes the shapes CLIP folder "
    "as a converted checkpoint instead",
    "gpu": "needs a GPU: CI runs it on the CPU (cuda -> cpu, float16 and bfloat16 -> float32)",
    "given-loader": "iterates over a `loader` of your own: CI gives two batches of the shapes world, with the "
    "fields the loop names (captions, references, images or pictures, videos)",
    "bench-data": "reads the official benchmark files from `benchmarks/`, which the reader downloads (the page says "
    "where from): CI links the format fixtures of tests/fixtures/bench there instead (a few made-up items per "
    "benchmark; numbers shown for such blocks are the fixtures')",
    # how it runs
    "continued": "runs after the block before it, in its folder and (Python) its namespace",
    "not-run": "not run, for the reason that follows: setup (installs software; CI runs the set-up itself), "
    "server (starts a server; tests/test_spaces_browser.py drives it), cluster (needs a Ray cluster; "
    "tests/test_ray_engine.py runs the engine on a local Ray), network (publishes to the Hub), weights (reads "
    "released weights CI cannot download; the tests read tiny files in the same format)",
    "setup": "reason word of not-run",
    "server": "reason word of not-run",
    "cluster": "reason word of not-run",
    "network": "reason word of not-run",
    "weights": "reason word of not-run",
}
NOT_RUN_REASONS = ("setup", "server", "cluster", "network", "weights")
SUBSTITUTIONS = ("hub-model", "word2vec", "pacs-weights", "gpu", "given-loader", "bench-data")
NOT_PROGRAMS = ("output", "layout", "citation")
RUNNABLE = {"python": "python", "py": "python", "pycon": "doctest", "console": "console", "bash": "bash"}

# The repository's folders every sandbox holds (as links); a block finds no other file there but those it makes.
REPOSITORY_LINKS = ("examples", "metrics", "src", "scripts", "spaces")
# What a ``bench-data`` block finds as ``benchmarks/`` in its folder, instead of the official files.
BENCH_FIXTURES = "tests/fixtures/bench"

MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")


@dataclass
class Block:
    path: str  # repository-relative
    line: int  # of the opening fence
    language: str
    code: str
    markers: tuple[str, ...] = ()
    output: Block | None = None  # the ``output`` text block that follows
    previous: Block | None = None  # the runnable block before, for ``continued``
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def kind(self) -> str | None:
        """``python``, ``doctest``, ``console`` or ``bash``; None for a block that is not a program."""
        kind = RUNNABLE.get(self.language)
        if kind == "python" and self.code.lstrip().startswith(">>>"):
            return "doctest"
        return kind

    @property
    def runs(self) -> bool:
        return self.kind is not None and "not-run" not in self.markers

    def reason(self) -> str:
        """Why a block is substituted or not run, for the summary."""
        if "not-run" in self.markers:
            return "not-run " + next(m for m in self.markers if m in NOT_RUN_REASONS)
        return " ".join(m for m in self.markers if m in SUBSTITUTIONS)


def documents() -> list[Path]:
    """The files whose blocks CI runs: the README, ARCHITECTURE.md, the docs pages and the metric cards."""
    pages = [REPO / "README.md", REPO / "ARCHITECTURE.md"]
    pages += sorted((REPO / "docs").rglob("*.md"))
    pages += sorted((REPO / "metrics").glob("*/README.md"))
    return pages


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the marker written right before it."""
    rel = path.relative_to(REPO).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, language = opening.groups()
        body, j = [], i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence[0] * len(fence)) and not lines[j].strip().strip(fence[0])
        ):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        words = tuple(shlex.split(marker.group(1))) if marker else ()
        blocks.append(Block(rel, i + 1, language.lower(), "\n".join(body) + "\n", words))
        i = j + 1
    _link(blocks)
    return blocks


def _link(blocks: list[Block]) -> None:
    previous = None
    for block in blocks:
        if "output" in block.markers and previous is not None and previous.output is None:
            previous.output = block
        if block.kind is not None:
            block.previous = previous
            previous = block


def all_blocks() -> list[Block]:
    return [block for page in documents() for block in parse(page)]


def problems(blocks: list[Block]) -> list[str]:
    """What is wrong with the markers: unknown words, a block neither runnable nor marked as not a program,
    an output block with nothing before it, ``not-run`` without a reason."""
    out = []
    for b in blocks:
        unknown = [m for m in b.markers if m not in MARKERS]
        if unknown:
            out.append(f"{b.id}: unknown marker word(s) {unknown}; known: {sorted(MARKERS)}")
        if b.kind is None and not any(m in NOT_PROGRAMS for m in b.markers):
            out.append(
                f"{b.id}: a ```{b.language or '(no language)'} block that is not run must be marked output, layout or citation"
            )
        if b.kind is not None and any(m in NOT_PROGRAMS for m in b.markers):
            out.append(f"{b.id}: a runnable ```{b.language} block is marked as not a program")
        if "not-run" in b.markers and not any(m in NOT_RUN_REASONS for m in b.markers):
            out.append(f"{b.id}: not-run needs a reason: one of {NOT_RUN_REASONS}")
        if "continued" in b.markers and b.previous is None:
            out.append(f"{b.id}: continued, but no runnable block comes before it on its page")
    outputs = [b for b in blocks if "output" in b.markers]
    claimed = {id(b.output) for b in blocks if b.output is not None}
    out += [
        f"{b.id}: an output block with no runnable block right before it"
        for b in outputs
        if id(b) not in claimed
    ]
    return out


# --- substitutions and expected outputs --------------------------------------------------------------------


def substituted(block: Block, shapes_clip: str) -> str:
    """The code CI runs: the block's own, with the textual substitutions its markers ask for."""
    code = block.code
    if "gpu" in block.markers:
        code = re.sub(r"\bcuda(:\d+)?\b", "cpu", code)
        code = re.sub(r"\b(b?float16)\b", "float32", code)
    if "word2vec" in block.markers:
        code = code.replace("fse/word2vec-google-news-300", "glove-6b-50d")
    if "pacs-weights" in block.markers:
        code = re.sub(r"[\w./-]*\b(clip_ViT-B-32|openClip_ViT-L-14|PACS)\.pth\b", shapes_clip, code)
    return code


def _prints(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
        for n in ast.walk(node)
    )


def printed_expectations(code: str) -> list[str]:
    """The outputs a Python block shows: the comment lines right after each top-level statement that prints
    (a ``print(...)``, or a loop, ``with`` or ``if`` with one inside: the comments then show every line it
    prints), in order."""
    tree = ast.parse(code)
    lines = code.splitlines()
    expected = []
    for node in tree.body:
        if not _prints(node) or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        shown, k = [], node.end_lineno  # 1-based end line: lines[k] is the next line
        while k < len(lines) and lines[k].startswith("#"):
            shown.append(lines[k][2:] if lines[k].startswith("# ") else lines[k][1:])
            k += 1
        if shown:
            expected.append("\n".join(shown))
    return expected


def _pattern(expected: str) -> str:
    """A regex of one expected text: literal except ``...``, which matches anything (newlines too)."""
    return "(?s:.*?)".join(re.escape(part) for part in expected.split("..."))


def matches_in_order(printed: str, expected: list[str]) -> bool:
    """Whether each expected text matches whole lines of ``printed``, in order (other lines may come between)."""
    text = "\n".join(line.rstrip() for line in printed.splitlines()) + "\n"
    between = r"(?:[^\n]*\n)*?"
    regex = "".join(f"{between}{_pattern(e.rstrip())}\n" for e in expected)
    return re.match(regex, text) is not None


def matches_whole(printed: str, expected: str) -> bool:
    """Whether ``printed`` is ``expected`` (``...`` matching anything), trailing spaces and blank ends aside."""
    text = "\n".join(line.rstrip() for line in printed.strip("\n").splitlines())
    want = "\n".join(line.rstrip() for line in expected.strip("\n").splitlines())
    return re.fullmatch(_pattern(want), text) is not None


def console_commands(code: str) -> list[tuple[str, str]]:
    """``(command, expected output)`` of each ``$ `` prompt of a console block (``\\`` continuations joined)."""
    steps: list[tuple[str, list[str]]] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            steps.append((command, []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise ValueError(f"console block: output before any '$ ' command: {line!r}")
        i += 1
    return [(command, "\n".join(out)) for command, out in steps]


def summary(blocks: list[Block]) -> dict[str, int]:
    """Counts for the report: blocks run (as written / substituted, by reason), not run, not programs."""
    counts: Counter[str] = Counter()
    for b in blocks:
        if b.kind is None:
            counts[f"not a program ({next((m for m in b.markers if m in NOT_PROGRAMS), 'unmarked')})"] += 1
        elif not b.runs:
            counts[b.reason()] += 1
        elif b.reason():
            counts[f"run, substituted: {b.reason()}"] += 1
        else:
            counts["run as written"] += 1
    return dict(sorted(counts.items()))


if __name__ == "__main__":
    found = all_blocks()
    for issue in problems(found):
        print("problem:", issue)
    for what, n in summary(found).items():
        print(f"{n:4d}  {what}")
    print(f"{len(found):4d}  blocks in {len(documents())} files")
    sys.exit(1 if problems(found) else 0)
