"""The GPU benchmark's measurements: drift against float32, utilisation sampling, model-object refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau

from capeval_dev.perf import device_checks

# --- drift of half precision against float32 ----------------------------------------------------------


def test_drift_is_per_sample_against_float32():
    base = np.array([0.1, 0.5, 0.9, 0.3])
    moved = {"float32": base, "float16": base + [0.0, 0.01, -0.02, 0.0], "bfloat16": base[::-1].copy()}
    drift = device_checks.precision_drift(lambda dtype: moved[dtype])
    assert drift["float16"]["max"] == pytest.approx(0.02)
    assert drift["float16"]["median"] == pytest.approx(0.005)
    assert drift["float16"]["p99"] == pytest.approx(np.percentile([0, 0.01, 0.02, 0], 99))
    assert drift["float16"]["kendall_tau"] == pytest.approx(1.0)
    assert drift["bfloat16"]["kendall_tau"] == pytest.approx(kendalltau(base, base[::-1]).statistic)
    assert drift["float16"]["n"] == 4 and drift["float16"]["score_std"] == pytest.approx(base.std())


# --- GPU utilisation --------------------------------------------------------------------------------


def test_utilisation_without_nvidia_smi_says_not_sampled(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with device_checks.GpuUtilisation() as util:
        pass
    assert util.summary() == {"gpu_util_samples": 0, "gpu_util_mean": None, "gpu_util_median": None}


def test_utilisation_reads_nvidia_smi_lines(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '10\\n30\\n[N/A]\\n50\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with device_checks.GpuUtilisation() as util:
        util._reader.join(timeout=10)
    assert util.summary() == {"gpu_util_samples": 3, "gpu_util_mean": 30.0, "gpu_util_median": 30.0}


# --- a model object asked onto another dtype ------------------------------------------------------------


def test_model_object_refusals_name_both_sides():
    from transformers import CLIPModel, CLIPProcessor

    from capeval.shapes import shapes_clip_path

    folder = str(shapes_clip_path())
    answers = device_checks.model_object_refusals(
        lambda: (CLIPModel.from_pretrained(folder).float(), CLIPProcessor.from_pretrained(folder)), "cpu"
    )
    assert answers["dtype='float16' for a float32 model"].startswith("ValueError: ")
    assert "pass dtype='float32'" in answers["dtype='float16' for a float32 model"]
    assert answers["device='cuda:1' for a model on cuda:0"].startswith("ValueError: ")
