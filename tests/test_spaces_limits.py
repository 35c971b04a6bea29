"""The demos' safety limits and input checks, without a browser (the browser tests drive the same paths).

Covers: upload size, image pixels (decompression bombs and extreme aspect ratios refused from the header, the
pixels of the model's resize counted), the pixels an EMScore request's sampled frames cost, video length, caption
counts and lengths, a bounded queue, no server path and no URL read on behalf of a visitor (through the
HTTP API too), error messages without server paths or stack traces.
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import zlib

import gradio as gr
import httpx
import numpy as np
import pytest
from PIL import Image

from capeval.demo import DEFAULT_LIMITS, InputError, Limits, build_demo, get_panel, launch
from capeval.demo.builder import visitor_message
from capeval.demo.choices import resolve
from capeval.demo.limits import check_texts, split_lines
from capeval.demo.models import decide_model, model_choices
from capeval.demo.uploads import (
    UploadedImage,
    check_image_header,
    check_uploaded_file,
    check_video_header,
)
from tests.frame_reads import count_frame_reads, write_frame


@pytest.fixture
def demo_model(monkeypatch, tiny_clip_dir):
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    return str(tiny_clip_dir)


def _black_bilevel_png(path, width: int, height: int):
    """A PNG of ``width`` x ``height`` black pixels at one bit each, as PIL saves ``Image.new("1", size)``, written
    row by row: PIL would first hold one byte per pixel (400 MB for 20,000 x 20,000)."""
    row = b"\0" * (1 + (width + 7) // 8)  # the filter byte, then the packed pixels
    rows_per_chunk = max(1, 1_000_000 // len(row))
    packer = zlib.compressobj(9)
    data = [packer.compress(row * min(rows_per_chunk, height - y)) for y in range(0, height, rows_per_chunk)]
    data.append(packer.flush())

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, greyscale
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"".join(data)) + chunk(b"IEND", b"")
    )
    return path


def test_image_over_the_pixel_limit_is_refused_from_its_header(uploads):
    path = uploads / "huge.png"
    Image.new("L", (6000, 6000)).save(path)  # 36 megapixels in a few kilobytes
    assert path.stat().st_size < 200_000
    with pytest.raises(InputError, match=r"6000x6000 \(36.0 megapixels\).*at most 25 megapixels"):
        check_image_header(path, DEFAULT_LIMITS)
    check_image_header(path, Limits(max_image_pixels=40_000_000))


def test_a_decompression_bomb_beyond_pils_own_limit_is_refused_not_crashed(uploads):
    path = _black_bilevel_png(
        uploads / "bomb.png", 20_000, 20_000
    )  # 400 megapixels: PIL itself raises on open
    with pytest.raises(Image.DecompressionBombError):
        Image.open(path)
    with pytest.raises(InputError, match="megapixels"):
        check_image_header(path, DEFAULT_LIMITS)


def test_uploads_over_the_size_limit_are_refused(uploads):
    path = uploads / "big.bin"
    path.write_bytes(b"\0" * 2048)
    with pytest.raises(InputError, match="is 0.0 MB; this demo accepts at most 0.0 MB"):
        check_uploaded_file(path, max_bytes=1024, what="image")
    assert check_uploaded_file(path, max_bytes=4096) == path.resolve()


@pytest.mark.parametrize("given", ["/etc/hostname", "/etc/../etc/passwd", "~/.bashrc", "relative/file.png"])
def test_server_paths_outside_the_upload_folder_are_never_read(given):
    with pytest.raises(InputError, match="Only uploaded files are read"):
        check_uploaded_file(given, max_bytes=10**9)


def test_a_symlink_in_the_upload_folder_pointing_outside_is_refused(uploads):
    link = uploads / "innocent.png"
    link.symlink_to("/etc/hostname")
    with pytest.raises(InputError, match="Only uploaded files are read"):
        check_uploaded_file(link, max_bytes=10**9)


@pytest.mark.parametrize("given", ["http://169.254.169.254/latest/meta-data", "https://example.com/cat.png"])
def test_urls_are_refused_without_fetching(given):
    with pytest.raises(InputError, match="does not fetch URLs"):
        check_uploaded_file(given, max_bytes=10**9)


def test_the_upload_components_refuse_to_download_a_url_into_the_cache(monkeypatch):
    fetched = []

    async def spy(url, *args, **kwargs):  # Gradio's downloader: must never be reached
        fetched.append(url)

    monkeypatch.setattr(gr.processing_utils, "async_ssrf_protected_download", spy)
    component = UploadedImage()
    with pytest.raises(gr.Error, match="does not fetch URLs"):
        asyncio.run(component.async_move_resource_to_block_cache("http://example.com/cat.png"))
    with pytest.raises(gr.Error, match="does not fetch URLs"):
        component.move_resource_to_block_cache("https://example.com/cat.png")
    assert fetched == []


def _video(path, seconds: int, fps: int = 1, size: int = 32):
    from capeval.clip.video import write_video

    frame = np.zeros((size, size, 3), dtype=np.uint8)
    return write_video(path, [frame] * (seconds * fps), fps=fps)


def test_videos_over_the_length_limit_are_refused_from_the_container(uploads):
    assert check_video_header(_video(uploads / "ok.mp4", 5), DEFAULT_LIMITS) == pytest.approx(5, abs=0.2)
    with pytest.raises(InputError, match=r"40.0 s long; this demo accepts at most 30 s"):
        check_video_header(_video(uploads / "long.mp4", 40), DEFAULT_LIMITS)


def test_a_file_that_is_not_a_video_is_a_message(uploads):
    path = uploads / "fake.mp4"
    path.write_bytes(b"not a video at all")
    with pytest.raises(InputError, match="not a readable video"):
        check_video_header(path, DEFAULT_LIMITS)


def test_caption_counts_and_lengths_are_bounded():
    limits = Limits(max_captions=2, max_caption_chars=10)
    assert split_lines("  a\n\n b \n") == ["a", "b"]
    with pytest.raises(InputError, match="at least one caption"):
        check_texts([], "caption", 2, limits)
    with pytest.raises(InputError, match="3 captions given; this demo scores at most 2"):
        check_texts(["a", "b", "c"], "caption", 2, limits)
    with pytest.raises(InputError, match="caption 2 has 11 characters"):
        check_texts(["ok", "x" * 11], "caption", 2, limits)
    assert check_texts([], "reference", 2, limits, required=False) == []


def test_a_visitor_cannot_name_a_model_outside_the_offered_list(demo_model):
    offered = model_choices(decide_model())
    assert resolve(offered, "configured", "model").spec == demo_model
    for key in ("/etc", "openai/clip-vit-large-patch14", "../../secret"):
        with pytest.raises(InputError, match="choose one from the list"):
            resolve(offered, key, "model")


def test_error_messages_keep_file_names_but_not_server_paths():
    err = ValueError("image 0 ('/tmp/gradio/3f2a/cat.png') is corrupt; see /opt/app/capeval/images.py")
    assert visitor_message(err) == "image 0 ('cat.png') is corrupt; see images.py"


def test_the_queue_is_bounded_and_scoring_runs_one_at_a_time(demo_model):
    limits = Limits(concurrency=1, queue_size=4)
    demo = build_demo("clipscore", limits=limits)
    assert demo._queue.max_size == 4
    (score,) = [fn for fn in demo.fns.values() if fn.api_name == "score"]
    assert score.concurrency_limit == 1 and score.concurrency_id == "score"


def test_unexpected_failures_show_a_message_not_a_stack_trace(demo_model, monkeypatch, uploads):
    panel = get_panel("clipscore")

    def broken(**kwargs):
        raise RuntimeError("secret internals at /srv/app/x.py line 3")

    monkeypatch.setattr(panel, "score", broken)
    demo = build_demo(panel)
    (score,) = [fn for fn in demo.fns.values() if fn.api_name == "score"]
    with pytest.raises(gr.Error) as info:
        score.fn(None, "a caption", "configured", "A photo depicts", 2.5)
    assert info.value.message == "Scoring failed unexpectedly; the error was logged on the server."


def test_scoring_errors_reach_the_visitor_as_plain_messages(demo_model, uploads):
    demo = build_demo("clipscore")
    (score,) = [fn for fn in demo.fns.values() if fn.api_name == "score"]
    with pytest.raises(gr.Error, match="Upload an image"):
        score.fn(None, "a caption", "configured", "A photo depicts", 2.5)
    image = uploads / "x.png"
    Image.new("RGB", (40, 40)).save(image)
    with pytest.raises(gr.Error, match="Type at least one caption"):
        score.fn(str(image), " \n ", "configured", "A photo depicts", 2.5)
    with pytest.raises(gr.Error, match="w must be between"):
        score.fn(str(image), "a caption", "configured", "A photo depicts", 1e6)


def _call_api(url: str, data: list, posted: threading.Event | None = None) -> tuple[str, str]:
    """Gradio's HTTP API: post a call to ``score`` and read its event stream; (last event, its data).
    ``posted`` is set once the server has answered the post (queued the call, or refused it)."""
    with httpx.Client(base_url=url, timeout=60) as client:
        posted_call = client.post("gradio_api/call/score", json={"data": data})
        if posted is not None:
            posted.set()
        if "event_id" not in posted_call.json():  # refused before queueing (e.g. the queue is full)
            return "refused", posted_call.text
        text = client.get(f"gradio_api/call/score/{posted_call.json()['event_id']}").text
    events = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("event:")]
    datas = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("data:")]
    return events[-1], datas[-1]


def test_the_http_api_reads_neither_server_paths_nor_urls(demo_model, monkeypatch):
    fetched = []

    async def spy(url, *args, **kwargs):
        fetched.append(url)

    monkeypatch.setattr(gr.processing_utils, "async_ssrf_protected_download", spy)
    demo = build_demo("clipscore")
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        options = ["a caption", "configured", "A photo depicts", 2.5]
        for path, message in (
            ("/etc/passwd", None),  # refused by Gradio itself ("not uploaded by a user"), shown as "Error"
            ("http://169.254.169.254/latest/meta-data/x.png", "This demo does not fetch URLs"),
        ):
            payload = {"path": path, "meta": {"_type": "gradio.FileData"}}
            event, data = _call_api(url, [payload, *options])
            assert event == "error", (path, data)
            assert "root:" not in data and "Traceback" not in data
            if message:
                assert message in json.loads(data)["error"]
        assert fetched == []
        event, data = _call_api(url, [None, *options])
        assert event == "error"
        assert json.loads(data)["error"] == "Upload an image (or click an example), then Score."
    finally:
        demo.close()


def test_the_server_itself_refuses_uploads_over_the_size_limit(demo_model):
    # The browser checks the size before uploading; a client that skips the browser meets the server's check.
    demo = build_demo("clipscore")
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            small = client.post("gradio_api/upload", files={"files": ("ok.png", b"\x89PNG" + b"\0" * 1000)})
            assert small.status_code == 200
            big = b"\0" * (DEFAULT_LIMITS.max_file_size + 1)
            refused = client.post("gradio_api/upload", files={"files": ("big.png", big)})
        assert refused.status_code == 413, refused.text
        assert "maximum allowed size" in refused.text
    finally:
        demo.close()


def test_scoring_runs_one_at_a_time_and_a_full_queue_refuses_more(demo_model, monkeypatch):
    from capeval.demo.panel import Scored
    from capeval.demo.render import Row

    panel = get_panel("clipscore", Limits(concurrency=1, queue_size=1))
    running, peak, lock = [0], [0], threading.Lock()
    scoring, release = threading.Event(), threading.Event()

    def slow(**kwargs):  # runs until the test has sent every call
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        scoring.set()
        release.wait(timeout=60)
        with lock:
            running[0] -= 1
        return Scored(rows=[Row("a caption", 1.0)], corpus=1.0)

    monkeypatch.setattr(panel, "score", slow)
    demo = build_demo(panel, limits=panel.limits)
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    outcomes: list[tuple[str, str]] = []
    args = [None, "a caption", "configured", "A photo depicts", 2.5]

    def call(posted: threading.Event | None = None) -> threading.Thread:
        thread = threading.Thread(target=lambda: outcomes.append(_call_api(url, args, posted)))
        thread.start()
        return thread

    try:
        first = call()  # runs
        assert scoring.wait(timeout=60)
        queued = threading.Event()
        second = call(queued)  # waits in the queue: it holds one call
        assert queued.wait(timeout=60)
        more = [call(), call()]  # while the first runs and the second waits: refused
        for t in more:
            t.join(timeout=60)
        release.set()
        for t in (first, second, *more):
            t.join(timeout=60)
    finally:
        release.set()
        demo.close()
    assert peak[0] == 1
    events = [event for event, _ in outcomes]
    assert len(events) == 4 and events.count("complete") >= 2, outcomes  # one running, one waiting
    refused = [data for event, data in outcomes if event != "complete"]
    assert refused and all("Queue is full" in d for d in refused), outcomes


def test_typed_text_is_shown_escaped_never_as_html():
    from capeval.demo.render import Row, ranked_table

    html = ranked_table([Row('<img src=x onerror="alert(1)">', 0.5)], "CLIP-S", 1.0)
    assert "<img src=x" not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


# --- Pixel limits count the pixels of the resize, not only those of the file ---


@pytest.fixture
def configured_model(monkeypatch, tiny_clip_dir):
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    return "configured"


def test_a_1x25000000_strip_within_the_megapixel_limit_is_refused_from_its_header(configured_model, uploads):
    from capeval.demo.uploads import check_image_header

    path = _black_bilevel_png(uploads / "strip.png", 1, 25_000_000)  # exactly the 25-megapixel limit, 49 KB
    assert Image.open(path).size == (1, 25_000_000)
    assert 1 * 25_000_000 <= DEFAULT_LIMITS.max_image_pixels
    message = r"The image is 1x25000000, an aspect ratio of 25,000,000:1; this demo accepts at most 100:1"
    with pytest.raises(InputError, match=message):
        check_image_header(path, DEFAULT_LIMITS)
    with pytest.raises(InputError, match=message):
        get_panel("clipscore").score(image=str(path), captions="a dog", model=configured_model)


def test_the_image_panels_count_the_resized_image_against_the_pixel_limit(configured_model, uploads):
    from capeval.demo.panels_image import CLIPScorePanel, RefCLIPScorePanel

    path = uploads / "wide.png"
    Image.new("RGB", (2000, 20), "gray").save(path)  # 40,000 pixels in the file, 100:1
    limits = Limits(max_image_pixels=50_000)  # the model (input 32) resizes it to 3200x32 = 102,400
    message = (
        r"The image is 2000x20: the model resizes it to 3200x32 \(102,400 pixels\) before cropping; "
        r"this demo accepts at most 50,000 pixels per image"
    )
    with pytest.raises(InputError, match=message):
        CLIPScorePanel(limits).score(image=str(path), captions="a dog", model=configured_model)
    with pytest.raises(InputError, match=message):
        RefCLIPScorePanel(limits).score(
            image=str(path), captions="a dog", references="a cat", model=configured_model
        )
    scored = CLIPScorePanel(Limits(max_image_pixels=110_000)).score(
        image=str(path), captions="a dog", model=configured_model
    )
    assert len(scored.rows) == 1


def test_a_video_with_an_extreme_aspect_ratio_is_refused_from_its_container(uploads):
    from capeval.clip.video import write_video
    from capeval.demo.uploads import check_video_header

    path = write_video(uploads / "strip.mp4", [np.zeros((2, 400, 3), dtype=np.uint8)] * 2, fps=2)
    with pytest.raises(
        InputError, match=r"The video is 400x2, an aspect ratio of 200:1; this demo accepts at most"
    ):
        check_video_header(path, DEFAULT_LIMITS)


# --- An EMScore request's frames are bounded before they are sampled ---


@pytest.fixture
def frame_reads(monkeypatch):
    """Counts the frames the video reader decodes and resizes."""
    return count_frame_reads(monkeypatch)


def test_the_emscore_space_refuses_a_strip_frame_before_sampling_it(configured_model, uploads, frame_reads):
    strip = uploads / "strip.png"
    Image.new("RGB", (1, 1000)).save(strip)
    with pytest.raises(
        InputError, match=r"The frame 1 is 1x1000, an aspect ratio of 1,000:1; this demo accepts"
    ):
        get_panel("emscore").score(
            frames=[str(strip)], captions="a dog", model=configured_model, num_frames=32
        )
    assert frame_reads == []


def test_the_emscore_space_bounds_the_pixels_of_a_request_and_says_the_limit(
    configured_model, uploads, frame_reads
):
    from capeval.demo.panels_video import EMScorePanel

    frames = [write_frame(uploads / f"f{k}.png", size=(400, 300), seed=k) for k in range(4)]
    # Each frame: 120,000 decoded + 42x32 = 1,344 resized; four of them are 485,376 pixels.
    panel = EMScorePanel(Limits(max_request_pixels=400_000))
    message = (
        r"The 4 frames sampled 32 times need 485,376 pixels of decoding and resizing \(each distinct frame once\); "
        r"this demo handles at most 400,000 pixels per request"
    )
    with pytest.raises(InputError, match=message):
        panel.score(frames=frames, captions="a dog", model=configured_model, num_frames=32)
    assert frame_reads == []
    scored = panel.score(frames=frames[:3], captions="a dog", model=configured_model, num_frames=32)
    assert len(scored.rows) == 1
    # Scoring and the heatmap each read the three distinct frames once, however often they are sampled.
    assert len(frame_reads) == 2 * 3


def test_a_video_request_counts_its_sampled_frames_after_resizing(configured_model, uploads):
    from capeval.clip.video import write_video
    from capeval.demo.panels_video import EMScorePanel

    path = write_video(uploads / "v.mp4", [np.zeros((32, 64, 3), dtype=np.uint8)] * 4, fps=4)
    # Each sampled frame: 2,048 converted + 64x32 = 2,048 resized; 16 samples are 65,536 pixels.
    with pytest.raises(
        InputError, match=r"16 frames of this video need 65,536 pixels of decoding and resizing"
    ):
        EMScorePanel(Limits(max_request_pixels=60_000)).score(
            video=str(path), captions="a dog", model=configured_model, num_frames=16
        )
