"""capeval.torchmetrics in training set-ups: two gloo processes (one of them, in a second run, without data) equal
one process on all the data, and Lightning logs capeval's numbers (a validation loop on the shapes world, the
training guide's snippet)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from torchmetrics_world import INPUTS, NAMES, callable_result, ddp_worker, torchmetric, world

import capeval

TOL = 1e-6
EXTRAS = {"refclipscore": ("clip_s_scores",), "pacscore": ("refpacscore_scores",), "wmd": ("distances",)}


@pytest.fixture(scope="module")
def data():
    return world()


@pytest.fixture(scope="module")
def expected(data):
    """capeval's callables on all twelve items at once."""
    return {name: callable_result(name, data) for name in NAMES}


def _close(got, want, tol=TOL):
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=0, atol=tol)


@pytest.mark.slow
def test_two_gloo_processes_each_with_half_the_data_equal_one_process_on_all(tmp_path, data, expected):
    import torch.multiprocessing as mp

    split = 7  # uneven shares: 7 items on rank 0, 5 on rank 1 (torchmetrics pads and trims the gathers)
    mp.spawn(ddp_worker, args=(2, str(tmp_path / "rendezvous"), str(tmp_path), split), nprocs=2, join=True)

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for name in NAMES:
        want = expected[name]
        assert [r[name]["local_items"] for r in ranks] == [split, 12 - split], name
        for rank in ranks:
            got = rank[name]
            assert got["compute"] == pytest.approx(want[name], abs=TOL), name
            _close(got["per_sample"], want["scores"])
            assert got["results"]["signature"] == want["signature"]
            for key in EXTRAS.get(name, ()):
                _close(got["results"][key], want[key])
    for name in ("clipscore", "emscore"):
        for rank in ranks:
            got = rank[f"{name}_rank0_only"]
            assert got["compute"] == pytest.approx(expected[name][name], abs=TOL)
            _close(got["per_sample"], expected[name]["scores"])


def test_lightning_validation_loop_logs_every_metric_equal_to_capevals_callables(tmp_path, data, expected):
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    items = [{key: data[key][i] for key in data} for i in range(len(data["preds"]))]
    loader = torch.utils.data.DataLoader(
        items, batch_size=5, collate_fn=lambda rows: {k: [r[k] for r in rows] for k in rows[0]}
    )

    class ShapesCaptioner(L.LightningModule):
        """Its 'generated' captions are the world's predictions; the metrics are what is under test."""

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.metrics = torch.nn.ModuleDict({name: torchmetric(name) for name in NAMES})

        def training_step(self, batch, batch_idx):
            return (self.weight - 1).pow(2).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def validation_step(self, batch, batch_idx):
            preds = batch["preds"]
            for name, metric in self.metrics.items():
                metric.update(preds, **{key: batch[key] for key in INPUTS[name]})
                self.log(f"val/{name}", metric, batch_size=len(preds))

    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=1,
        logger=CSVLogger(tmp_path, name="shapes"),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(ShapesCaptioner(), train_dataloaders=loader, val_dataloaders=loader)

    (log,) = tmp_path.glob("shapes/*/metrics.csv")
    rows = [row for row in csv.DictReader(log.open()) if row.get("val/clipscore")]
    assert len(rows) == 1  # one validation epoch (the sanity check's two batches are not logged)
    for name in NAMES:
        assert float(rows[0][f"val/{name}"]) == pytest.approx(expected[name][name], abs=TOL), name


def test_the_docs_lightning_snippet_logs_capevals_numbers(repo_root, capsys):
    import re

    page = (repo_root / "docs" / "guides" / "training.md").read_text(encoding="utf-8")
    section = page.split("## Lightning and torchmetrics", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {"__name__": "docs_snippet"}
    exec(compile(code, "docs/guides/training.md (Lightning and torchmetrics)", "exec"), namespace)
    logged = namespace["trainer"].callback_metrics
    rows, clip = namespace["rows"], str(namespace["shapes_clip_path"]())
    preds = [row["caption"] for row in rows]
    images = [row["image"] for row in rows]
    references = [row["references"] for row in rows]
    want = {
        "val/clipscore": capeval.CLIPScore(model=clip)(preds, images=images)["clipscore"],
        "val/refclipscore": capeval.RefCLIPScore(model=clip)(preds, references, images=images)[
            "refclipscore"
        ],
        "val/wmd": capeval.WMD()(preds, references)["wmd"],
    }
    for key, value in want.items():
        assert float(logged[key]) == pytest.approx(value, abs=TOL), key
    assert "val/clipscore" in capsys.readouterr().out
