"""Calls made in a child process whose address space is capped a little above what its imports use: a file built
to make capeval allocate gigabytes fails there with an allocation error, never takes the machine's memory, and the
test sees which error came back.

``run_capped({"name": ("module:function", args, kwargs)})`` runs every call in one child (one import of torch
and transformers for all) and returns ``{"name": (exception type or "", message)}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEADROOM_BYTES = (
    3 << 30
)  # above the address space after the imports: far below the 5 GB the crafted files declare


def run_capped(calls: dict[str, tuple[str, list, dict]], timeout: float = 600) -> dict[str, tuple[str, str]]:
    import capeval

    src = str(Path(capeval.__file__).resolve().parents[1])
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.memory_capped", json.dumps(calls)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=timeout,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(f"the capped child failed ({done.returncode}): {done.stderr[-3000:]}")
    return {name: tuple(outcome) for name, outcome in json.loads(lines[-1]).items()}


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _main(calls: dict) -> None:
    import importlib
    import resource

    import torch  # noqa: F401 - imported before the cap: the cap is on what the calls allocate
    import transformers  # noqa: F401

    import capeval.clip.backbones  # noqa: F401

    limit = _address_space() + HEADROOM_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    outcomes = {}
    for name, (target, args, kwargs) in calls.items():
        module, function = target.split(":")
        try:
            getattr(importlib.import_module(module), function)(*args, **kwargs)
            outcomes[name] = ("", "")
        except BaseException as err:  # noqa: BLE001 - an allocation failure is an outcome the test reads too
            outcomes[name] = (type(err).__name__, str(err))
    print(json.dumps(outcomes))


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
