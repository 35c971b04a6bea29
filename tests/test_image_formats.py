"""Image files are opened in capeval's raster formats only, on every path an image arrives by.

An EPS file (PostScript) is something PIL would hand to Ghostscript when decoding it, whatever the file is
called. Each test puts a stand-in ``gs`` first on PATH that records any call; it must never be called, and
the image is refused by name with the format its bytes show. Where a corpus is scored, the row gets the error
and the other rows are scored.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import EpsImagePlugin, Image

import capeval
from capeval.clip.image_formats import RASTER_FORMATS, ImageFormatError, detected_format, open_raster
from capeval.clip.images import load_image

EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n"
    b"newpath 0 0 moveto 16 16 lineto stroke\nshowpage\n%%EOF\n"
)
REFUSED = "in the EPS format; capeval decodes only JPEG, PNG, WEBP, GIF, BMP, TIFF"


@pytest.fixture
def ghostscript_calls(tmp_path, monkeypatch) -> Path:
    """A stand-in ``gs`` first on PATH that records each call (arguments and the file it was given); PIL is made
    to look for Ghostscript again, so an EPS decode would reach it. Returns the log, which must stay absent."""
    folder = tmp_path / "stand-in-bin"
    folder.mkdir()
    log = tmp_path / "gs-calls.log"
    gs = folder / "gs"
    gs.write_text(
        "#!/bin/sh\n"
        f'echo "gs $*" >> "{log}"\n'
        'for a in "$@"; do [ -f "$a" ] && cat "$a" >> ' + f'"{log}"; done\n'
        '[ "$1" = "--version" ] && echo 10.0 && exit 0\nexit 1\n'
    )
    gs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None)
    return log


def _png(color: int = 90, size: int = 24) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), color, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _encoded(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((20, 30, 3), 120, dtype=np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def test_the_stand_in_ghostscript_is_what_pil_would_run_on_eps_bytes(ghostscript_calls):
    # Proves the fixture sees a call: PIL's own open with every format decodes EPS through it.
    with (
        Image.open(io.BytesIO(EPS)) as img,
        pytest.raises(subprocess.CalledProcessError),
    ):  # the stand-in fails
        img.load()
    assert "%!PS-Adobe" in ghostscript_calls.read_text()


# --- The allow-list itself ---


@pytest.mark.parametrize("fmt", RASTER_FORMATS)
def test_every_allowed_raster_format_opens_and_decodes(fmt):
    img = load_image({"bytes": _encoded(fmt)}, 0)
    assert img.size == (30, 20)
    assert img.format == fmt


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (EPS, "EPS"),
        (b"\xc5\xd0\xd3\xc6" + b"\0" * 28, "EPS"),  # DOS EPS binary header
        (b"8BPS\x00\x01" + b"\0" * 26, "PSD"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG"),
        (b"%PDF-1.7\n", "PDF"),
        (b"P6\n4 4\n255\n" + b"\0" * 48, "PPM"),
    ],
)
def test_other_formats_are_refused_naming_the_format_found(ghostscript_calls, data, named):
    with pytest.raises(ImageFormatError, match=rf"image 4 \('x.jpg'\) is in the {named} format"):
        load_image({"bytes": data, "path": "x.jpg"}, 4)
    assert detected_format(data[:16]) == named
    assert not ghostscript_calls.exists()


def test_bytes_that_are_no_image_are_refused_by_name():
    with pytest.raises(
        ImageFormatError, match=r"image 2 is not a readable image file \(no format capeval knows\)"
    ):
        load_image({"bytes": b"just some text"}, 2)


def test_an_allowed_format_with_a_damaged_header_is_called_corrupt_not_another_format():
    with pytest.raises(ValueError, match="image 0 is corrupt or truncated: its GIF header cannot be parsed"):
        load_image({"bytes": b"GIF89a"}, 0)


def test_open_raster_parses_the_header_only():
    img = open_raster(io.BytesIO(_encoded("PNG")), "image")
    assert img.format == "PNG" and img._im is None  # nothing decoded yet: the caller checks the size first


# --- Every surface: library, evaluate module, CLI, COCO folder, corpus on both engines, Spaces ---


def test_a_path_given_to_the_library_is_refused_and_ghostscript_never_runs(
    tmp_path, tiny_clip_dir, ghostscript_calls
):
    (tmp_path / "photo.jpg").write_bytes(EPS)
    (tmp_path / "ok.png").write_bytes(_png())
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(ValueError, match=rf"image 1 \('.*photo.jpg'\) is {REFUSED}"):
        scorer(["a grey square", "a line"], images=[str(tmp_path / "ok.png"), str(tmp_path / "photo.jpg")])
    assert not ghostscript_calls.exists()


def test_the_evaluate_module_refuses_eps_bytes_in_an_image_dict(tiny_clip_dir, ghostscript_calls):
    import evaluate

    module = evaluate.load(str(Path(__file__).resolve().parents[1] / "metrics" / "clipscore"))
    with pytest.raises(ValueError, match=f"image 0 is {REFUSED}"):
        module.compute(
            predictions=["a line"],
            images=[{"bytes": EPS, "path": None}],
            model=str(tiny_clip_dir),
            device="cpu",
        )
    assert not ghostscript_calls.exists()


def test_the_cli_refuses_an_eps_file_in_a_coco_image_folder(
    tmp_path, tiny_clip_dir, ghostscript_calls, capsys
):
    from capeval.cli import main

    images = tmp_path / "images"
    images.mkdir()
    (images / "1.jpg").write_bytes(_png())
    (images / "2.jpg").write_bytes(EPS)
    results = [{"image_id": 1, "caption": "a grey square"}, {"image_id": 2, "caption": "a line"}]
    (tmp_path / "results.json").write_text(json.dumps(results))
    code = main(["score", str(tmp_path / "results.json"), str(images), "--model", str(tiny_clip_dir)])
    assert code != 0
    assert re.search(r"image 1 \('.*/images/2.jpg'\) is in the EPS format", capsys.readouterr().err)
    assert not ghostscript_calls.exists()


def _eps_tar(folder: Path) -> Path:
    folder.mkdir()
    with tarfile.open(folder / "00000.tar", "w") as archive:
        for key, image, caption in (("a", _png(), "a grey square"), ("b", EPS, "a line")):
            for name, data in ((f"{key}.jpg", image), (f"{key}.txt", caption.encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return folder


def _eps_parquet(folder: Path) -> Path:
    folder.mkdir()
    table = pa.table({"key": ["a", "b"], "jpg": [_png(), EPS], "caption": ["a grey square", "a line"]})
    pq.write_table(table, folder / "00000.parquet")
    return folder


SHARD_WRITERS = {"webdataset": _eps_tar, "parquet": _eps_parquet}


def _scored_rows(out: Path) -> dict[str, dict]:
    rows = pq.read_table(out / "scores" / "00000.parquet").to_pylist()
    return {row["key"]: row for row in rows}


def _assert_eps_row_refused_and_the_other_scored(out: Path) -> None:
    rows = _scored_rows(out)
    assert rows["a"]["error"] is None and rows["a"]["clipscore"] is not None
    assert rows["b"]["clipscore"] is None
    assert "image of b cannot be read" in rows["b"]["error"] and REFUSED in rows["b"]["error"]


@pytest.mark.parametrize("kind", SHARD_WRITERS)
def test_a_shard_member_or_cell_holding_eps_is_a_row_error_on_the_local_engine(
    tmp_path, tiny_clip_dir, ghostscript_calls, kind
):
    from capeval.corpus.run import score_corpus

    source = SHARD_WRITERS[kind](tmp_path / "in")
    score_corpus(source, tmp_path / "out", ["clipscore"], model=str(tiny_clip_dir), device="cpu")
    _assert_eps_row_refused_and_the_other_scored(tmp_path / "out")
    assert not ghostscript_calls.exists()


def test_the_space_refuses_an_uploaded_eps_named_jpg(uploads, ghostscript_calls):
    import gradio as gr
    from gradio.data_classes import FileData

    from capeval.demo.uploads import UploadedImage

    path = uploads / "holiday.jpg"
    path.write_bytes(EPS)
    with pytest.raises(gr.Error, match=f"The image is {REFUSED}"):
        UploadedImage().preprocess(FileData(path=str(path), orig_name="holiday.jpg"))
    assert not ghostscript_calls.exists()


def test_the_space_refuses_a_pasted_eps_and_keeps_a_pasted_png_byte_for_byte(ghostscript_calls):
    import gradio as gr
    from gradio.data_classes import ImageData

    from capeval.demo.uploads import UploadedImage

    pasted = "data:image/png;base64," + base64.b64encode(EPS).decode()
    with pytest.raises(gr.Error, match=f"The pasted image is {REFUSED}"):
        UploadedImage().preprocess(ImageData(url=pasted, path="pasted.png"))
    assert not ghostscript_calls.exists()

    png = _png(33)
    kept = UploadedImage().preprocess(
        ImageData(url="data:image/png;base64," + base64.b64encode(png).decode(), path="pasted.png")
    )
    assert Path(kept).read_bytes() == png and kept.endswith(".png")


def test_the_space_over_http_refuses_an_uploaded_eps(tiny_clip_dir, monkeypatch, ghostscript_calls):
    import httpx

    from capeval.demo import build_demo, launch
    from tests.test_spaces_limits import _call_api

    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    demo = build_demo("clipscore")
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            uploaded = client.post("gradio_api/upload", files={"files": ("cat.jpg", EPS)}).json()[0]
        options = ["a line", "configured", "A photo depicts", 2.5]
        # Pasted images reach the server as uploads too (its file mover replaces a payload's data: URL by the
        # uploaded file's); the data: URL branch of the component is proven in the test above.
        payloads = [{"path": uploaded, "orig_name": "cat.jpg", "meta": {"_type": "gradio.FileData"}}]
        for payload in payloads:
            event, data = _call_api(url, [payload, *options])
            assert event == "error"
            assert "in the EPS format" in json.loads(data)["error"], data
    finally:
        demo.close()
    assert not ghostscript_calls.exists()
