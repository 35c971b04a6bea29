#!/usr/bin/env python
"""How long a bare ``evaluate.load("clipscore")`` takes after ``capeval install-modules``, and how long a Hub model
the local cache lacks takes to be refused, by what the Hub answers.

    .venv/bin/python scripts/bench_module_loading.py                      # offline, 404, 401, closed; 5 runs each
    .venv/bin/python scripts/bench_module_loading.py --answers silent --repeats 1   # a Hub that never answers
    .venv/bin/python scripts/bench_module_loading.py --sections models    # the model refusals alone

Each run is a fresh process with a temporary ``HF_MODULES_CACHE`` (the modules installed there once), an empty
Hugging Face cache and its working directory in a temporary folder; ``HF_ENDPOINT`` points at a local stand-in (see
:mod:`capeval_dev.perf.module_loading`), so the times are evaluate's or capeval's own look-up logic plus loopback
round trips; a real Hub adds its network latency to each request counted. ``modules``: the time of
``evaluate.load`` alone (evaluate and capeval are imported first). ``models``: the time of
``capeval.load_backbone(--model-id)`` until its refusal (one question to the Hub, never huggingface_hub's retries:
about 25 s without network), which ``tests/test_model_sources.py`` proves by counting the questions and the waits.
Each table gives the median and the requests the stand-in received.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from capeval_dev.perf.module_loading import (
    HUB_ANSWERS,
    child_env,
    load_in_fresh_process,
    refuse_in_fresh_process,
    stand_in_hub,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--answers", nargs="+", default=["offline", "404", "401", "closed"], choices=HUB_ANSWERS
    )
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per answer (default 5)")
    parser.add_argument("--metric", default="clipscore", help="the bare name loaded (default clipscore)")
    parser.add_argument("--sections", nargs="+", default=["modules", "models"], choices=["modules", "models"])
    parser.add_argument(
        "--model-id", default="org/no-such-clip", help="the Hub model refused (default org/no-such-clip)"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="capeval-load-") as tmp:
        tmp = Path(tmp)
        cache, home, cwd = tmp / "modules", tmp / "home", tmp / "elsewhere"
        cwd.mkdir()
        if "modules" in args.sections:
            _modules(args, cache, home, cwd)
        if "models" in args.sections:
            _models(args, cache, home, cwd)
    return 0


def _modules(args, cache: Path, home: Path, cwd: Path) -> None:
    install = [sys.executable, "-m", "capeval.cli", "install-modules", "--modules-cache", str(cache)]
    subprocess.run(install, check=True, stdout=subprocess.DEVNULL)
    print(
        f"evaluate.load({args.metric!r}) after capeval install-modules; median of {args.repeats} fresh processes"
    )
    print("| Hub answer | load (s) | min..max (s) | requests to the Hub per load |")
    print("|---|---|---|---|")
    for answer in args.answers:
        times, requests = [], 0
        for _ in range(args.repeats):
            with stand_in_hub(answer) as (endpoint, seen):
                env = child_env(answer, endpoint, cache, home)
                out = load_in_fresh_process([args.metric], env, cwd)[args.metric]
            if f"evaluate-metric--{args.metric}" not in out["module"]:
                raise SystemExit(f"{answer}: evaluate loaded {out['module']}, not the installed module")
            times.append(out["seconds"])
            requests = len([r for r in seen if "/spaces/" in r])
        counted = "n/a (not counted)" if answer in ("closed", "silent") else str(requests)
        print(
            f"| {answer} | {statistics.median(times):.2f} | {min(times):.2f}..{max(times):.2f} | {counted} |"
        )


def _models(args, cache: Path, home: Path, cwd: Path) -> None:
    print(
        f"\ncapeval.load_backbone({args.model_id!r}), not in the local Hugging Face cache, until its refusal; "
        f"median of {args.repeats} fresh processes"
    )
    print("| Hub answer | refused in (s) | min..max (s) | requests to the Hub | refusal |")
    print("|---|---|---|---|---|")
    for answer in args.answers:
        times, requests, outcome = [], 0, ""
        for _ in range(args.repeats):
            with stand_in_hub(answer) as (endpoint, seen):
                env = child_env(answer, endpoint, cache, home)
                out = refuse_in_fresh_process([args.model_id], env, cwd)[args.model_id]
            times.append(out["seconds"])
            requests, outcome = len([r for r in seen if args.model_id in r]), out["outcome"]
        counted = "n/a (not counted)" if answer in ("closed", "silent") else str(requests)
        kind, _, message = outcome.partition(": ")
        why = message.split("Hugging Face cache and ", 1)[-1].split(". Either", 1)[0]  # what the Hub did
        refusal = f"{kind}: {why[:90]}".replace("|", "/")
        print(
            f"| {answer} | {statistics.median(times):.2f} | {min(times):.2f}..{max(times):.2f} | {counted} | "
            f"{refusal} |"
        )


if __name__ == "__main__":
    sys.exit(main())
