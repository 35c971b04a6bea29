"""Measurements that only mean something on an accelerator: GPU utilisation sampled while work runs, the drift
of half precision against float32 per sample, the refusals of a model object asked onto another device, and the
out-of-memory back-off under a real memory cap.

Each returns plain numbers (a dict) so ``scripts/bench_gpu.py`` can print and save them; none is a test.
"""

from __future__ import annotations

import statistics
import subprocess
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

DTYPES = ("float32", "float16", "bfloat16")


class GpuUtilisation:
    """Samples ``nvidia-smi``'s GPU utilisation (percent) every ``interval_ms`` while the block runs.

    ``samples`` stays empty where ``nvidia-smi`` is absent (a CPU machine), so the caller reports "not sampled"
    rather than a zero.
    """

    def __init__(self, interval_ms: int = 100) -> None:
        self.interval_ms = interval_ms
        self.samples: list[float] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuUtilisation:
        try:
            self._proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 f"-lms={self.interval_ms}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
        except FileNotFoundError:
            return self
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        # Started by __enter__ only once nvidia-smi runs, so its output pipe is there.
        for line in self._proc.stdout:
            first = line.strip().split(",")[0]
            if first.isdigit():
                self.samples.append(float(first))

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=10)

    def summary(self) -> dict[str, float | int | None]:
        if not self.samples:
            return {"gpu_util_samples": 0, "gpu_util_mean": None, "gpu_util_median": None}
        return {
            "gpu_util_samples": len(self.samples),
            "gpu_util_mean": statistics.fmean(self.samples),
            "gpu_util_median": statistics.median(self.samples),
        }


def precision_drift(
    score: Callable[[str], np.ndarray], dtypes: Sequence[str] = ("float16", "bfloat16")
) -> dict[str, dict[str, float]]:
    """Per-sample drift of each half-precision dtype against float32.

    Args:
        score: ``dtype -> (N,)`` per-sample scores of the same pairs.

    Returns:
        ``{dtype: {max, p99, median (absolute differences), kendall_tau, score_std}}``.
    """
    from scipy.stats import kendalltau

    base = score("float32")
    out = {}
    for dt in dtypes:
        half = score(dt)
        diff = np.abs(half - base)
        out[dt] = {
            "n": int(base.size),
            "max": float(diff.max()),
            "p99": float(np.percentile(diff, 99)),
            "median": float(np.median(diff)),
            "kendall_tau": float(kendalltau(base, half).statistic),
            "score_std": float(base.std()),
        }
    return out


def model_object_refusals(build: Callable[[], tuple[Any, Any]], device: str) -> dict[str, str]:
    """What a model object placed on ``device`` answers when asked onto another device or dtype: each case's
    error message (or ``"accepted"``, which is a failure of the check)."""
    from capeval.clipscore import CLIPScore

    model, processor = build()
    model.to(device).eval()
    cases = {
        "device='cpu' for a model on the GPU": dict(device="cpu"),
        "device='cuda:1' for a model on cuda:0": dict(device="cuda:1"),
        "dtype='float16' for a float32 model": dict(dtype="float16"),
    }
    answers = {}
    for name, options in cases.items():
        try:
            CLIPScore(model=(model, processor), **options)
        except ValueError as err:
            answers[name] = f"ValueError: {err}"
        else:
            answers[name] = "accepted"
    return answers


def oom_backoff(encode: Callable[[int], torch.Tensor], small: int, large: int, headroom: float = 1.5) -> dict:
    """Encode at ``small`` uncapped, then at ``large`` under a real memory cap on the current CUDA device: the
    weights plus ``headroom`` times the activations ``small`` needed. The caching allocator raises a genuine
    out-of-memory past the cap, so the back-off must lower the batch until it fits.

    Returns:
        the cap, the back-off's warnings (its steps), the peak allocated under the cap, and the largest
        per-value difference between the capped and the uncapped embeddings (the same images).
    """
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    reference = encode(small)
    activations = torch.cuda.max_memory_allocated() - weights
    cap = int(weights + headroom * activations)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.set_per_process_memory_fraction(cap / total)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            capped = encode(large)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    return {
        "weights_mib": weights / 2**20,
        "cap_mib": cap / 2**20,
        "uncapped_batch": small,
        "asked_batch": large,
        "warnings": [str(w.message) for w in caught if "out of memory" in str(w.message)],
        "peak_mib_under_cap": torch.cuda.max_memory_allocated() / 2**20,
        "max_abs_diff_vs_uncapped": float((capped - reference).abs().max()),
    }
