"""One long-lived process that runs the docs' Python blocks and ``capeval`` commands for tests/test_docs_snippets.py.

Sharing a process keeps the models a block loads (cached by signature) for the next block, as a notebook would,
while each block gets a namespace and a folder of its own. Requests are JSON lines on stdin; each answer is one
JSON line on the file descriptor given as the first argument (everything the blocks print goes to their
captured stdout or to stderr, never into the answers). The further arguments are modules imported before the
first request (what the blocks of this process import anyway), so that a worker started ahead of its first
block loads them while the other worker runs.
"""

from __future__ import annotations

import atexit
import contextlib
import doctest
import importlib
import io
import json
import os
import runpy
import sys
import traceback

FIELDS = {
    "captions": "candidate",
    "predictions": "candidate",
    "preds": "candidate",
    "references": "references",
    "refs": "references",
    "images": "image",
    "pictures": "image",
    "videos": "video",
}


def loader(names: list[str]) -> list[tuple]:
    """Two batches of the shapes world with the fields a ``for a, b in loader`` loop names."""
    from capeval.shapes import draw_frames, example_items

    items = list(example_items(6).values())
    for item in items:
        item["video"] = draw_frames(item["scene"], n_frames=4)
    unknown = [n for n in names if n not in FIELDS]
    if unknown:
        raise ValueError(
            f"given-loader: no stand-in for the loop variable(s) {unknown}; known: {sorted(FIELDS)}"
        )
    batches = [items[:3], items[3:]]
    return [tuple([it[FIELDS[n]] for it in batch] for n in names) for batch in batches]


def run_python(request: dict, namespaces: dict) -> dict:
    key = request["namespace"]
    namespace = namespaces.get(request.get("continues")) if request.get("continues") else None
    if namespace is None:
        namespace = {"__name__": "__main__"}
    if request.get("loader"):
        namespace["loader"] = loader(request["loader"])
    namespaces[key] = namespace
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(request["code"], request["name"], "exec"), namespace)
    except BaseException:  # noqa: B036 - a block's SystemExit or KeyboardInterrupt is its failure, not ours
        return {"stdout": out.getvalue(), "error": traceback.format_exc()}
    return {"stdout": out.getvalue(), "error": None}


def run_doctest(request: dict) -> dict:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(request["code"], {"__name__": "__main__"}, request["name"], request["name"], 0)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with contextlib.redirect_stdout(report):
        result = runner.run(test, out=report.write)
    return {"stdout": report.getvalue(), "error": report.getvalue() if result.failed else None}


def run_cli(request: dict) -> dict:
    """``capeval ARGS`` through the entry point (``capeval.cli.main``), ``python -m MODULE ARGS`` and
    ``python FILE ARGS`` as the interpreter runs them: ``__main__``, ``sys.argv`` and (a file) its folder first
    on ``sys.path``."""
    argv = request["argv"]
    kind = request.get("kind", "capeval")
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            if kind == "capeval":
                from capeval.cli import main

                rc = main(argv)
            elif kind == "module":
                sys.argv = ["-m", *argv[1:]]  # run_module puts the module's file in sys.argv[0]
                sys.path.insert(0, os.getcwd())
                runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
                rc = 0
            else:
                sys.argv = list(argv)
                sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
                runpy.run_path(argv[0], run_name="__main__")
                rc = 0
    except SystemExit as stop:
        rc = stop.code if isinstance(stop.code, int) or stop.code is None else 1
    except BaseException:  # noqa: B036
        return {"stdout": out.getvalue(), "error": traceback.format_exc(), "rc": 1}
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    return {"stdout": out.getvalue(), "error": None, "rc": rc or 0}


def serve(answer_fd: int) -> None:
    answers = os.fdopen(answer_fd, "w", buffering=1)
    namespaces: dict[str, dict] = {}
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        if request["op"] == "python":
            answer = run_python(request, namespaces)
        elif request["op"] == "doctest":
            answer = run_doctest(request)
        else:
            answer = run_cli(request)
        answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    fd = int(sys.argv[1])
    os.dup2(2, 1)  # anything written to fd 1 by a library goes to stderr
    for module in sys.argv[2:]:
        importlib.import_module(module)
    serve(fd)
    # Stdin closed: the exit handlers (temporary folders, child processes) run, but not the interpreter's
    # teardown of every module, which takes seconds once torch and evaluate are loaded and changes nothing.
    atexit._run_exitfuncs()
    sys.stderr.flush()
    os._exit(0)
