"""Shards written by the real img2dataset (1.47.0), downloading a small site served on 127.0.0.1.

img2dataset lives in its own virtual environment, ``.venv-img2dataset`` (made by ``scripts/test.sh``, versions in
``constraints-img2dataset.txt``): it pins ``pandas<3``, ``webdataset<0.3`` and ``albumentations<2``, which the
project's environment does not share. The tests run its command line, so what they read is what a user's run
writes, never a copy of its writer.

The site: ``IMAGE_COUNT`` pictures of the sizes in ``SIZES`` (JPEG and PNG), ``BROKEN_COUNT`` files whose bytes
are not an image, ``MISSING_COUNT`` URLs that answer 404, and one URL listed twice. Every URL row carries a
caption and a ``uid`` of 32 hexadecimal characters (DataComp's), which ``--save_additional_columns`` keeps.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-img2dataset"
COMMAND = VENV / "bin" / "img2dataset"
SIZES = ((32, 24), (64, 48), (17, 90), (120, 80))  # (width, height): wider, taller and odd-sized pictures
IMAGE_COUNT = 24
BROKEN_COUNT = 3
MISSING_COUNT = 3
SAMPLES_PER_SHARD = 20  # 31 URL rows make two shards
IMAGE_SIZE = 48  # img2dataset resizes (keep_ratio), so width/height differ from original_width/height


@dataclass(frozen=True)
class UrlRow:
    url: str
    caption: str
    uid: str
    kind: str  # "image", "broken", "missing" or "repeat"
    size: tuple[int, int] | None  # the served picture's (width, height)


@dataclass(frozen=True)
class Img2DatasetRun:
    """One site downloaded twice: ``webdataset`` and ``parquet`` are img2dataset's output folders."""

    rows: list[UrlRow]  # in the URL list's order: img2dataset's key of row i is i's place in its shard
    webdataset: Path
    parquet: Path
    seconds: float  # serving, both downloads and their start-up


def uid_of(i: int) -> str:
    return hashlib.md5(f"sample {i}".encode()).hexdigest()  # 32 hex characters, as DataComp's uids


def _picture(i: int, size: tuple[int, int], fmt: str) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return buf.getvalue()


def build_site(folder: Path, base_url: str) -> list[UrlRow]:
    """The site's files in ``folder`` and its URL rows (the 404s name files that are not there)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(IMAGE_COUNT):
        size, fmt = SIZES[i % len(SIZES)], ("JPEG", "PNG")[i % 2]
        name = f"img{i:03d}.{fmt.lower()}"
        (folder / name).write_bytes(_picture(i, size, fmt))
        rows.append(UrlRow(f"{base_url}/{name}", f"picture number {i}", uid_of(i), "image", size))
    for j in range(BROKEN_COUNT):
        name = f"broken{j}.jpg"
        (folder / name).write_bytes(b"this is not an image " * (j + 1))
        rows.append(UrlRow(f"{base_url}/{name}", f"broken file {j}", uid_of(100 + j), "broken", None))
    for j in range(MISSING_COUNT):
        rows.append(UrlRow(f"{base_url}/gone{j}.jpg", f"missing file {j}", uid_of(200 + j), "missing", None))
    first = rows[0]
    rows.append(UrlRow(first.url, "the first picture again", uid_of(300), "repeat", first.size))
    # Shuffled once, reproducibly, so failures fall in both shards and not at the end of the list.
    order = np.random.default_rng(0).permutation(len(rows))
    return [rows[k] for k in order]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """An HTTP server for ``folder`` on 127.0.0.1 (a free port), answering from a daemon thread."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def write_url_list(rows: list[UrlRow], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({f: [getattr(r, f) for r in rows] for f in ("url", "caption", "uid")})
    pq.write_table(table, path)


def start_img2dataset(url_list: Path, output: Path, output_format: str) -> subprocess.Popen:
    """img2dataset's command line, one process and a few threads, as a user would start it."""
    env = {
        **os.environ,
        "NO_ALBUMENTATIONS_UPDATE": "1",  # albumentations asks PyPI for its newest version at import
        "WANDB_MODE": "disabled",
    }
    args = [
        str(COMMAND),
        f"--url_list={url_list}",
        "--input_format=parquet",
        "--url_col=url",
        "--caption_col=caption",
        "--save_additional_columns=['uid']",
        f"--output_format={output_format}",
        f"--output_folder={output}",
        "--processes_count=1",
        "--thread_count=4",
        f"--number_sample_per_shard={SAMPLES_PER_SHARD}",
        f"--image_size={IMAGE_SIZE}",
        "--resize_mode=keep_ratio",
        "--timeout=5",
        "--retries=0",
        "--enable_wandb=False",
    ]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process: subprocess.Popen, output_format: str) -> None:
    try:
        log, _ = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        log, _ = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"img2dataset ({output_format}) failed with {process.returncode}:\n{log[-4000:]}")


def download(folder: Path) -> Img2DatasetRun:
    """Serve the site from ``folder/site`` and download it into WebDataset and Parquet output.

    The two downloads run side by side: most of each is img2dataset's start-up (imports, a spawned process).
    """
    start = time.perf_counter()
    (folder / "site").mkdir(parents=True, exist_ok=True)
    server, base_url = serve(folder / "site")
    try:
        rows = build_site(folder / "site", base_url)
        url_list = folder / "urls.parquet"
        write_url_list(rows, url_list)
        outputs = {fmt: folder / fmt for fmt in ("webdataset", "parquet")}
        running = {fmt: start_img2dataset(url_list, out, fmt) for fmt, out in outputs.items()}
        for fmt, process in running.items():
            _finish(process, fmt)
    finally:
        server.shutdown()
        server.server_close()
    return Img2DatasetRun(rows, outputs["webdataset"], outputs["parquet"], time.perf_counter() - start)


def sidecar(run_folder: Path, key: str) -> dict:
    """The ``.json`` member of ``key`` in the WebDataset output, parsed."""
    import tarfile

    for tar in sorted(run_folder.glob("*.tar")):
        with tarfile.open(tar) as archive:
            try:
                member = archive.getmember(f"{key}.json")
            except KeyError:
                continue
            return json.loads(archive.extractfile(member).read())
    raise KeyError(key)
