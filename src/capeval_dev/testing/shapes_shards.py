"""Shards of the shapes world in img2dataset's layout, for tests and benchmarks of the shard engines.

img2dataset's ``WebDatasetSampleWriter`` (rom1504/img2dataset, ``img2dataset/writer.py``) writes per shard
``NNNNN.tar`` with ``<key>.jpg``, ``<key>.txt`` and ``<key>.json`` per sample, keys being the shard id and the
sample's position zero-padded (``000010003``), and beside it ``NNNNN.parquet`` (the samples' metadata) and
``NNNNN_stats.json``. These files copy that structure; each ``.json`` also carries the sample's reference
captions under ``references`` (img2dataset has none) so RefCLIP-S can be scored from shards.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from capeval.shapes import example_items
from capeval.shapes.scenes import all_scenes

SHARD_DIGITS = 5  # img2dataset: oom_shard_count for fewer than 100,000 shards
SAMPLE_DIGITS = 4  # img2dataset: oom_sample_per_shard for up to 10,000 samples per shard


def _jpeg(image) -> bytes:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    archive.addfile(info, io.BytesIO(data))


def write_shapes_shards(
    folder: str | Path,
    shards: int = 4,
    rows_per_shard: int = 6,
    seed: int = 0,
    damaged: bool = False,
    kind: str = "webdataset",
    image_size: tuple[int, int] = (96, 72),
) -> dict[str, dict]:
    """Write ``shards`` shards of the shapes world; returns ``{key: {"image", "caption", "references"}}``.

    Args:
        folder: where ``00000.tar`` ... (or ``00000.parquet`` ... for ``kind="parquet"``) go.
        damaged: shard 1 gets a corrupt JPEG (its second sample) and an empty caption (its third), and the
            last shard is cut inside its last member's data (a truncated download). The returned dict
            still lists every sample written (the truncated one included).
        kind: ``"webdataset"`` (img2dataset's tars with their side files) or ``"parquet"``.
        image_size: (width, height) of the drawn JPEGs (benchmarks use web-sized ones).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    distinct = min(shards * rows_per_shard, len(all_scenes()))  # past the 75 scenes, samples repeat them
    items = list(example_items(n_images=distinct, seed=seed, size=image_size).values())
    samples: dict[str, dict] = {}
    for s in range(shards):
        meta_rows = []
        tar_path = out / f"{s:0{SHARD_DIGITS}d}.tar"
        records = []
        for j in range(rows_per_shard):
            item = items[(s * rows_per_shard + j) % distinct]
            key = f"{s:0{SHARD_DIGITS}d}{j:0{SAMPLE_DIGITS}d}"
            image, caption = _jpeg(item["image"]), item["candidate"]
            if damaged and s == 1 and j == 1:
                image = b"\xff\xd8\xff\xe0 not a jpeg at all"
            if damaged and s == 1 and j == 2:
                caption = ""
            meta = {"url": f"https://example.invalid/{key}.jpg", "key": key, "status": "success",
                    "error_message": None, "caption": caption, "width": image_size[0], "height": image_size[1],
                    "references": item["references"]}  # fmt: skip
            records.append((key, image, caption, meta))
            meta_rows.append({k: v for k, v in meta.items() if k != "references"})
            samples[key] = {"image": image, "caption": caption, "references": item["references"]}
        if kind == "parquet":
            table = pa.table({
                "key": [r[0] for r in records], "jpg": [r[1] for r in records], "caption": [r[2] for r in records],
                "references": [r[3]["references"] for r in records],
            })  # fmt: skip
            pq.write_table(table, out / f"{s:0{SHARD_DIGITS}d}.parquet")
            continue
        with tarfile.open(tar_path, "w") as archive:
            for key, image, caption, meta in records:
                _add(archive, f"{key}.jpg", image)
                _add(archive, f"{key}.txt", caption.encode())
                _add(archive, f"{key}.json", json.dumps(meta).encode())
        if damaged and s == shards - 1:
            with tarfile.open(tar_path) as archive:
                last = archive.getmembers()[-1]
            # A download cut short: the file ends halfway through the last member's data.
            tar_path.write_bytes(tar_path.read_bytes()[: last.offset_data + last.size // 2])
        pq.write_table(pa.Table.from_pylist(meta_rows), out / f"{s:0{SHARD_DIGITS}d}.parquet")
        stats = {
            "count": rows_per_shard,
            "successes": rows_per_shard,
            "failed_to_download": 0,
            "failed_to_resize": 0,
            "status_dict": {"success": rows_per_shard},
        }  # img2dataset 1.47's counts
        (out / f"{s:0{SHARD_DIGITS}d}_stats.json").write_text(json.dumps(stats))
    return samples
