"""Every code block of the README, the docs and the metric cards runs as written, offline, and prints what the
page shows it printing (tests/docs_snippets.py: the markers, the substitutions and the matching rules)."""

from __future__ import annotations

import json
import os
import selectors
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from docs_snippets import (
    BENCH_FIXTURES,
    REPO,
    REPOSITORY_LINKS,
    Block,
    all_blocks,
    console_commands,
    matches_in_order,
    matches_whole,
    printed_expectations,
    problems,
    substituted,
    summary,
)
from hub_caches import shapes_clip_hub_cache

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.runs]
TIMEOUT_S = 300  # one block; the whole page set takes about two minutes on 2 cores
SHELL_SYNTAX = set("|&;<>()$`*?[]{}~=")
# What every worker imports before its first block: what the blocks of both import anyway (torch, the CLIP
# classes, evaluate and the capeval modules over them).
PRELOAD = ("torch", "transformers.models.clip.modeling_clip", "evaluate", "capeval.clipscore")


class Worker:
    """tests/docs_snippet_worker.py in a process of its own, with the environment of one kind of block."""

    def __init__(self, env: dict[str, str]):
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("docs_snippet_worker.py")),
                str(write_fd),
                *PRELOAD,
            ],
            stdin=subprocess.PIPE,
            env=env,
            pass_fds=(write_fd,),
            text=True,
        )
        os.close(write_fd)
        self.answers = os.fdopen(read_fd, "r")
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.answers, selectors.EVENT_READ)

    def ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        if not self.selector.select(timeout=TIMEOUT_S):
            self.close()
            pytest.fail(f"{request['name']}: no answer within {TIMEOUT_S} s")
        line = self.answers.readline()
        if not line:
            pytest.fail(f"{request['name']}: the worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def stop(self) -> None:
        """Close its stdin: it ends after the request it is running (``close`` waits for that)."""
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def close(self) -> None:
        self.stop()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.answers.close()


class Runner:
    """Sandboxes, the two workers (without and with the stand-in Hub cache) and the shell environment."""

    def __init__(self, root: Path):
        from capeval.shapes import shapes_clip_path

        self.root = root
        self.shapes_clip = str(shapes_clip_path())
        empty = root / "empty-hub"
        empty.mkdir()
        base = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "HF_HOME": str(root / "hf-home"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_EVALUATE_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "XDG_CACHE_HOME": str(root / "cache"),
        }
        self.env = {
            False: {**base, "HF_HUB_CACHE": str(empty)},
            True: {**base, "HF_HUB_CACHE": str(shapes_clip_hub_cache(root))},
        }
        self.workers: dict[bool, Worker] = {}
        self.sandboxes: dict[str, Path] = {}

    def worker(self, hub: bool) -> Worker:
        if hub not in self.workers:
            self.workers[hub] = Worker(self.env[hub])
        return self.workers[hub]

    def sandbox(self, block: Block) -> Path:
        """The block's folder: its own, or the one of the block it continues."""
        if "continued" in block.markers and block.previous is not None:
            folder = self.sandboxes[block.previous.id]
        else:
            folder = self.root / "runs" / block.id.replace("/", "_").replace(":", "-")
            folder.mkdir(parents=True)
            for name in REPOSITORY_LINKS:
                (folder / name).symlink_to(REPO / name)
            if "bench-data" in block.markers:
                (folder / "benchmarks").symlink_to(REPO / BENCH_FIXTURES)
        self.sandboxes[block.id] = folder
        return folder

    def start(self) -> None:
        """Both workers at once: the one whose first block comes later loads its modules meanwhile."""
        for hub in (False, True):
            self.worker(hub)

    def close(self) -> None:
        for worker in self.workers.values():  # both end at once
            worker.stop()
        for worker in self.workers.values():
            worker.close()


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    runner = Runner(tmp_path_factory.mktemp("docs-snippets"))
    runner.start()
    yield runner
    runner.close()


def _loop_names(code: str) -> list[str]:
    import ast

    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Name) and node.iter.id == "loader":
            target = node.target
            return [t.id for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    raise AssertionError("given-loader: the block has no `for ... in loader` loop")


def _check_output(block: Block, printed: str) -> None:
    if block.output is not None:
        assert matches_whole(printed, block.output.code), (
            f"{block.id} printed:\n{printed}\n--- but {block.output.id} shows:\n{block.output.code}"
        )


def _run_python(runner: Runner, block: Block, code: str, folder: Path) -> None:
    request = {
        "op": "python",
        "code": code,
        "cwd": str(folder),
        "name": block.id,
        "namespace": block.id,
        "continues": block.previous.id if "continued" in block.markers else None,
        "loader": _loop_names(code) if "given-loader" in block.markers else None,
    }
    answer = runner.worker("hub-model" in block.markers).ask(request)
    assert answer["error"] is None, f"{block.id} failed:\n{answer['error']}\nprinted:\n{answer['stdout']}"
    expected = printed_expectations(block.code)
    assert matches_in_order(answer["stdout"], expected), (
        f"{block.id} printed:\n{answer['stdout']}\n--- but the page shows, in this order:\n"
        + "\n".join(expected)
    )
    _check_output(block, answer["stdout"])


def _unquoted(command: str) -> list[tuple[str, bool]]:
    """Each character of a command line with whether the shell reads it as syntax: outside quotes, or ``$`` and
    a backquote inside double quotes (they still expand there)."""
    out, quote, escaped = [], None, False
    for ch in command:
        if escaped:
            out.append((ch, False))
            escaped = False
        elif ch == "\\" and quote != "'":
            out.append((ch, False))
            escaped = True
        elif quote is None and ch in "'\"":
            out.append((ch, False))
            quote = ch
        elif ch == quote:
            out.append((ch, False))
            quote = None
        else:
            out.append((ch, quote is None or (quote == '"' and ch in "$`")))
    return out


def _worker_request(command: str) -> dict | None:
    """The worker's request for a simple command (no shell syntax: no pipe, redirection, expansion, variable or
    glob) that starts a Python program: ``capeval ...`` (through the entry point, ``capeval.cli.main``),
    ``python -m MODULE ...`` or ``python FILE ...``. The worker runs it as the interpreter would, sparing a
    process start and the imports per command. None for any other command: ``bash`` runs it."""
    if any(syntax and ch in SHELL_SYNTAX - {"="} | {"#"} for ch, syntax in _unquoted(command)):
        return None
    words = shlex.split(command)
    if not words or "=" in words[0]:
        return None
    if words[0] == "capeval":
        return {"op": "cli", "kind": "capeval", "argv": words[1:]}
    if words[0] == "python" and len(words) > 2 and words[1] == "-m":
        return {"op": "cli", "kind": "module", "argv": words[2:]}
    if words[0] == "python" and len(words) > 1 and not words[1].startswith("-"):
        return {"op": "cli", "kind": "script", "argv": words[1:]}
    return None


def _pipe_split(command: str) -> tuple[str, str] | None:
    """``(first command, the rest)`` of a pipeline, split at its first ``|``; None for a command with none."""
    chars = _unquoted(command)
    for i, (ch, syntax) in enumerate(chars):
        if ch == "|" and syntax:
            if i + 1 < len(chars) and chars[i + 1][0] == "|":
                return None  # ||: not a pipe
            return command[:i], command[i + 1 :]
    return None


def _in_worker(runner: Runner, block: Block, command: str, folder: Path) -> str:
    request = _worker_request(command)
    answer = runner.worker("hub-model" in block.markers).ask(
        {**request, "cwd": str(folder), "name": block.id}
    )
    assert answer["error"] is None and answer["rc"] == 0, (
        f"{block.id}: `{command}` exited {answer['rc']}:\n{answer['error']}\n{answer['stdout']}"
    )
    return answer["stdout"]


def _run_command(runner: Runner, block: Block, command: str, folder: Path) -> str:
    """What one command line prints: a simple Python command in the worker; a pipeline whose first command is
    one, that command in the worker and the rest in ``bash`` reading what it printed; any other in ``bash``."""
    if _worker_request(command) is not None:
        return _in_worker(runner, block, command, folder)
    piped = _pipe_split(command)
    if piped is not None and _worker_request(piped[0]) is not None:
        return _shell(runner, block, piped[1], folder, given=_in_worker(runner, block, piped[0], folder))
    return _shell(runner, block, command, folder)


def _script_lines(script: str) -> list[str] | None:
    """The commands of a ``bash`` block that is a plain list of commands, one a line (``\\`` continuations joined,
    comments and blank lines dropped); None when a line is anything else (a loop, a variable, a pipe...)."""
    lines, pending = [], ""
    for line in script.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line, pending = pending + line, ""
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if _worker_request(line) is None:
            return None
        lines.append(line)
    return None if pending else lines


def _shell(runner: Runner, block: Block, script: str, folder: Path, given: str = "") -> str:
    env = runner.env["hub-model" in block.markers]
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=folder,
        env=env,
        input=given,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _run_console(runner: Runner, block: Block, code: str, folder: Path) -> None:
    printed_all = []
    for command, expected in console_commands(code):
        printed = _run_command(runner, block, command, folder)
        if expected.strip():
            assert matches_whole(printed, expected), (
                f"{block.id}: `{command}` printed:\n{printed}\n--- expected:\n{expected}"
            )
        printed_all.append(printed)
    _check_output(block, "".join(printed_all))


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_block_runs_offline_and_prints_what_the_page_shows(runner, block):
    folder = runner.sandbox(block)
    code = substituted(block, runner.shapes_clip)
    if block.kind == "python":
        _run_python(runner, block, code, folder)
    elif block.kind == "doctest":
        answer = runner.worker("hub-model" in block.markers).ask(
            {"op": "doctest", "code": code, "cwd": str(folder), "name": block.id}
        )
        assert answer["error"] is None, f"{block.id}:\n{answer['error']}"
    elif block.kind == "console":
        _run_console(runner, block, code, folder)
    else:
        lines = _script_lines(code)
        if lines is None:
            printed = _shell(runner, block, code, folder)
        else:  # as bash -e runs it: one command after the other, the first failure ends the block
            printed = "".join(_in_worker(runner, block, line, folder) for line in lines)
        _check_output(block, printed)


def test_every_block_is_run_or_marked_as_not_a_program():
    assert problems(BLOCKS) == []


def test_substituted_and_unrun_blocks_are_counted_by_reason():
    counts = summary(BLOCKS)
    assert sum(counts.values()) == len(BLOCKS)
    assert counts.get("run as written", 0) > sum(
        n for what, n in counts.items() if what.startswith("not-run")
    )
