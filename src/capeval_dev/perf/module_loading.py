"""How a bare ``evaluate.load("<name>")`` behaves, and how long it takes, when the Hub says it has no such module,
refuses the connection or never answers: fresh processes against a local stand-in for the Hub (``HF_ENDPOINT``).
The same for a Hub model the local cache lacks: how long capeval takes to refuse it (``refuse_in_fresh_process``).

Used by ``scripts/bench_module_loading.py`` (the times docs/guides/evaluate.md quotes) and ``tests/test_install_modules.py``
(which also loads once per Hub answer in a single process, :func:`load_per_answer_in_one_process`).
The child process is this module run as a script (``python -m capeval_dev.perf.module_loading SPEC``): it imports
evaluate and capeval first, so the time of each ``evaluate.load`` is the look-up and import of the module alone.
"""

from __future__ import annotations

import http.server
import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# offline: HF_EVALUATE_OFFLINE=1 (no request at all); 404: every URL is missing; 401: what huggingface.co answers an
# anonymous client about a repository it does not show; closed: nothing listens on the port; silent: the connection
# is accepted and never answered (a firewall that swallows packets, a hung proxy).
HUB_ANSWERS = ("offline", "404", "401", "closed", "silent")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
_SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the capeval package (src/ in a clone)
_OWN_VARS = (*_OFFLINE_VARS, "HF_ENDPOINT", "HF_MODULES_CACHE", "HF_HOME", "HF_UPDATE_DOWNLOAD_COUNTS")


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 404
    files: dict[str, bytes] = {}
    seen: list[str] = []

    def _answer(self, body: bool) -> None:
        self.seen.append(f"{self.command} {self.path}")
        name = self.path.rsplit("/", 1)[-1]
        content = self.files.get(name)
        if content is None:
            self.send_response(self.status)
            self.send_header("X-Error-Code", "RepoNotFound" if self.status == 401 else "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(content)))
        self.send_header("ETag", f'"{len(content)}"')
        self.end_headers()
        if body:
            self.wfile.write(content)

    def do_HEAD(self):  # noqa: N802 (http.server's method names)
        self._answer(body=False)

    def do_GET(self):  # noqa: N802
        self._answer(body=True)

    def log_message(self, *args):
        pass


def _free_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound once and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(handler: type, port: int = 0) -> http.server.ThreadingHTTPServer:
    """``handler``'s server on 127.0.0.1 (a free port for 0), answering in a daemon thread until ``_stop``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _stop(server: http.server.ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@contextmanager
def stand_in_hub(
    answer: str, files: dict[str, bytes] | None = None
) -> Iterator[tuple[str | None, list[str]]]:
    """A local endpoint for ``HF_ENDPOINT`` giving one of ``HUB_ANSWERS``.

    Args:
        answer: one of ``HUB_ANSWERS``.
        files: for ``"404"``/``"401"``: file names served (200) wherever they are asked for, as the Hub serves a
            module that exists.

    Yields:
        The endpoint URL (``None`` for ``"offline"``) and the list of requests it received (``"HEAD /path"``).
    """
    if answer not in HUB_ANSWERS:
        raise ValueError(f"unknown Hub answer {answer!r}; choose from {', '.join(HUB_ANSWERS)}")
    seen: list[str] = []
    if answer == "offline":
        yield None, seen
    elif answer == "closed":
        yield f"http://127.0.0.1:{_free_port()}", seen
    elif answer == "silent":
        with socket.socket() as listener:
            # Listening but never accepting: the kernel completes the handshake, no byte ever comes back.
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    else:
        handler = type(
            "Handler", (_Handler,), {"status": int(answer), "files": dict(files or {}), "seen": seen}
        )
        server = _serve(handler)
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}", seen
        finally:
            _stop(server)


class SwitchingHub:
    """One local endpoint for ``HF_ENDPOINT`` whose answer changes between loads (:func:`load_per_answer_in_one_process`):
    ``"404"`` or ``"401"`` from a server on its port, or ``"closed"``: nothing listening on that port (the server
    stopped, or not started yet). ``seen[answer]`` lists the requests received while that answer was given."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.seen: dict[str, list[str]] = {}
        self._handler = type("Handler", (_Handler,), {"status": 404, "files": {}, "seen": []})
        self._server: http.server.ThreadingHTTPServer | None = None

    def answer(self, answer: str) -> None:
        """Give ``answer`` (``"404"``, ``"401"`` or ``"closed"``) from now on."""
        if answer not in ("404", "401", "closed"):
            raise ValueError(f"a switching Hub answers 404, 401 or closed, not {answer!r}")
        self._handler.seen = self.seen.setdefault(answer, [])
        if answer == "closed":
            self.close()
            return
        self._handler.status = int(answer)
        if self._server is None:
            self._server = _serve(self._handler, self.port)

    def close(self) -> None:
        if self._server is not None:
            _stop(self._server)
            self._server = None


def child_env(answer: str, endpoint: str | None, modules_cache: Path, hf_home: Path) -> dict[str, str]:
    """The environment of a fresh process: this one's, with the Hugging Face variables set for ``answer``.

    evaluate's download counter (a HEAD to a fixed S3 address, not ``HF_ENDPOINT``) is switched off so that only
    the stand-in is ever contacted.
    """
    env = {k: v for k, v in os.environ.items() if k not in _OWN_VARS}
    env.update(HF_MODULES_CACHE=str(modules_cache), HF_HOME=str(hf_home), HF_UPDATE_DOWNLOAD_COUNTS="0")
    if answer == "offline":
        env.update(dict.fromkeys(_OFFLINE_VARS, "1"))
    else:
        env["HF_ENDPOINT"] = str(endpoint)
    source = str(_SOURCE_ROOT)  # the child imports this capeval, wherever it was imported from here
    env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    return env


def load_in_fresh_process(
    targets: list[str],
    env: dict[str, str],
    cwd: str | os.PathLike,
    compute: list[str] = (),
    timeout: float = 600,
) -> dict[str, dict]:
    """``evaluate.load`` each target in a new Python process; returns, per target, the file of the module evaluate
    imported (``file``), its dotted name (``module``), the load time in seconds and, for the targets also listed in
    ``compute``, the result of ``compute(**example_inputs(<name>))``.

    Raises:
        RuntimeError: the process failed (its stderr is in the message).
    """
    return _run_child({"load": list(targets), "compute": list(compute)}, env, cwd, timeout)


def load_per_answer_in_one_process(
    target: str,
    answers: list[str],
    modules_cache: Path,
    hf_home: Path,
    cwd: str | os.PathLike,
    timeout: float = 600,
) -> dict[str, tuple[dict, list[str]]]:
    """``evaluate.load(target)`` once per Hub answer, in order, in one new Python process: its ``HF_ENDPOINT`` is a
    :class:`SwitchingHub` that the process asks to switch to the next answer before each load. Before each load the
    process also forgets every module evaluate imported from its module cache, so each load imports its module
    anew. Returns, per answer, what :func:`load_in_fresh_process` returns for the target and the requests the
    stand-in received while giving that answer.

    Raises:
        RuntimeError: the process failed (its stderr is in the message).
    """
    hub = SwitchingHub()
    env = child_env("404", hub.endpoint, modules_cache, hf_home)
    spec = json.dumps({"load": [target], "compute": [], "steps": list(answers)})
    try:
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "capeval_dev.perf.module_loading", spec],
                env=env,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
            watchdog = threading.Timer(timeout, proc.kill)
            watchdog.start()
            try:
                last = ""
                for line in proc.stdout:
                    last = line
                    step = _step_of(line)
                    if step is not None:
                        hub.answer(step)
                        proc.stdin.write("\n")
                        proc.stdin.flush()
                proc.wait()
            finally:
                watchdog.cancel()
            if proc.returncode != 0:
                err.seek(0)
                raise RuntimeError(
                    f"evaluate.load in a fresh process failed ({proc.returncode}):\n{err.read()[-4000:]}"
                )
    finally:
        hub.close()
    out = json.loads(last)
    return {answer: (out[answer], hub.seen.get(answer, [])) for answer in answers}


def _step_of(line: str) -> str | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message.get("step") if isinstance(message, dict) and set(message) == {"step"} else None


def refuse_in_fresh_process(
    models: list[str], env: dict[str, str], cwd: str | os.PathLike, timeout: float = 600
) -> dict[str, dict]:
    """``capeval.load_backbone`` each Hub model (one the local cache lacks) in a new Python process; returns, per
    model, the seconds until it returned or raised (``seconds``) and how it ended (``outcome``: the error's class
    and the start of its message, or ``"loaded"``).

    Raises:
        RuntimeError: the process failed (its stderr is in the message).
    """
    return _run_child({"load": [], "compute": [], "refuse": list(models)}, env, cwd, timeout)


def _run_child(spec: dict, env: dict[str, str], cwd: str | os.PathLike, timeout: float) -> dict[str, dict]:
    spec = json.dumps(spec)
    done = subprocess.run(
        [sys.executable, "-m", "capeval_dev.perf.module_loading", spec],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"evaluate.load in a fresh process failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def example_inputs(name: str) -> dict:
    """Inputs on which each of the six modules computes offline: two drawn scenes, the committed shapes CLIP (also
    as PAC-S's converted checkpoint) and the packaged word vectors."""
    from capeval.shapes import Scene, draw, shapes_clip_path

    clip = str(shapes_clip_path())
    predictions = ["a red circle on the left", "a blue square on the right"]
    references = [["a red circle", "a circle on the left"], ["a blue square"]]
    images = [draw(Scene("red", "circle", "left")), draw(Scene("blue", "square", "right"))]
    inputs = {
        "clipscore": {"images": images, "model": clip},
        "refclipscore": {"references": references, "images": images, "model": clip},
        "pacscore": {"references": references, "images": images, "checkpoint": clip},
        "wembsim": {"references": references},
        "wmd": {"references": references},
        "emscore": {"references": references, "model": clip},
    }
    if name not in inputs:
        raise ValueError(f"no example inputs for {name!r}; known: {', '.join(inputs)}")
    return {"predictions": predictions, **inputs[name]}


def _main(spec: dict) -> dict[str, dict]:
    # Imported before timing so the look-up alone is measured; capeval itself is imported already (``-m`` runs
    # this module inside its package).
    import datasets  # noqa: F401
    import evaluate
    import evaluate.config

    out = {}
    if spec.get("steps"):
        # One load per step: the parent switches its stand-in Hub when asked, then answers on stdin.
        (target,) = spec["load"]
        for step in spec["steps"]:
            print(json.dumps({"step": step}), flush=True)
            sys.stdin.readline()
            dynamic = evaluate.config.MODULE_NAME_FOR_DYNAMIC_MODULES  # evaluate_modules
            for name in [m for m in sys.modules if m.split(".")[0] == dynamic]:
                del sys.modules[name]
            module = evaluate.load(target)
            out[step] = {"file": inspect.getfile(type(module)), "module": type(module).__module__}
        return out
    for target in spec["load"]:
        start = time.perf_counter()
        module = evaluate.load(target)
        seconds = time.perf_counter() - start
        file = inspect.getfile(type(module))
        entry = {"file": file, "module": type(module).__module__, "seconds": seconds}
        if target in spec["compute"]:
            entry["result"] = module.compute(**example_inputs(Path(file).stem))
        out[target] = entry
    if spec.get("refuse"):
        import huggingface_hub  # noqa: F401 - imported before timing, as transformers below
        import transformers  # noqa: F401

        from capeval.clip.backbones import load_backbone

        for model in spec["refuse"]:
            start = time.perf_counter()
            try:
                load_backbone(model, device="cpu")
                outcome = "loaded"
            except (OSError, ValueError) as err:
                outcome = f"{type(err).__name__}: {err}"
            out[model] = {"seconds": time.perf_counter() - start, "outcome": outcome}
    return out


if __name__ == "__main__":
    print(json.dumps(_main(json.loads(sys.argv[1]))))
