"""Videos are opened with capeval's container demuxers only, chosen from the file's bytes, never by FFmpeg.

A playlist (HLS ``#EXTM3U``, an ``ffconcat`` script) makes FFmpeg read the files or URLs it names. The tests
name a FIFO in such a playlist: opening the FIFO for reading is what FFmpeg would do to follow it, and a writer
thread waiting on the FIFO sees any reader. The FIFO must never be opened; the video is refused by name.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from capeval.clip.video import read_frames, write_video  # noqa: E402
from capeval.clip.video_containers import (  # noqa: E402
    VIDEO_CONTAINERS,
    VideoContainerError,
    detect_container,
)

FRAMES = [np.full((32, 48, 3), 40 * i, dtype=np.uint8) for i in range(4)]
WRITTEN = {  # file name -> (codec, the demuxer capeval must choose)
    "clip.mp4": ("libx264", "mov"),
    "clip.mov": ("mpeg4", "mov"),
    "clip.mkv": ("libx264", "matroska"),
    "clip.webm": ("libvpx-vp9", "matroska"),
    "clip.avi": ("mpeg4", "avi"),
    "clip.ts": ("mpeg2video", "mpegts"),
}


class FifoWatch:
    """A FIFO and a thread blocked opening it for writing: ``opened`` turns true as soon as anyone opens it
    for reading. ``close`` unblocks the thread by opening it itself, after recording what it saw."""

    def __init__(self, path: Path):
        self.path = path
        os.mkfifo(path)
        self._seen = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)
        if not self._closing:
            self._seen.set()
        os.close(fd)

    def opened(self) -> bool:
        return self._seen.wait(0.5)

    def close(self) -> None:
        self._closing = True
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._thread.join(5)
        os.close(fd)


@pytest.fixture
def watched(tmp_path):
    watch = FifoWatch(tmp_path / "segment.ts")
    yield watch
    watch.close()


def _hls(path: Path, target: Path) -> Path:
    path.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{target}\n#EXT-X-ENDLIST\n")
    return path


def test_the_fifo_watch_sees_ffmpeg_follow_a_playlist_when_it_guesses_the_demuxer(tmp_path, watched):
    # What every test below rules out: FFmpeg's own guess opens the HLS demuxer, which reads the segment.
    playlist = _hls(tmp_path / "list.m3u8", watched.path)
    with pytest.raises(av.error.FFmpegError):
        av.open(str(playlist))
    assert watched.opened()


# --- Detection ---


@pytest.mark.parametrize("name", WRITTEN)
def test_videos_written_by_pyav_are_detected_and_decode(tmp_path, name):
    codec, demuxer = WRITTEN[name]
    path = write_video(tmp_path / name, FRAMES, codec=codec)
    assert detect_container(path.read_bytes()[:1024]) == demuxer
    frames = read_frames(path, None, 16, 0)
    assert len(frames) == 4 and frames[0].shape == (16, 16, 3)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("#EXTM3U\n#EXTINF:1,\nhttp://169.254.169.254/x.ts\n", "an HLS playlist"),
        ("\ufeff#EXTM3U\n", "an HLS playlist"),
        ("ffconcat version 1.0\nfile '/etc/passwd'\n", "an FFmpeg concat script"),
        ("[playlist]\nFile1=/etc/passwd\n", "a PLS playlist"),
        ("<?xml version='1.0'?><MPD/>", "an XML file"),
        ("just words", "a text file"),
        ("", "an empty file"),
    ],
)
def test_playlists_scripts_and_text_are_refused_by_name_unread(tmp_path, content, named):
    path = tmp_path / "video.mp4"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"video 3 \('.*video.mp4'\) is (not a readable video file: it is )?{named}"
    ):
        read_frames(path, 2, 16, 3)


def test_binary_that_is_no_container_is_refused(tmp_path):
    path = tmp_path / "v.bin"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(
        VideoContainerError, match="is not a readable video file: it is no container capeval opens"
    ):
        read_frames(path, 2, 16, 0)


def test_the_allowed_containers_are_named_in_the_refusal():
    with pytest.raises(VideoContainerError) as info:
        from capeval.clip.video_containers import open_video_container

        path = Path(__file__)  # a Python file: text
        open_video_container(av, path, "video 0")
    for name in VIDEO_CONTAINERS.values():
        assert name in str(info.value)


def test_a_file_name_that_ffmpeg_would_read_as_a_protocol_is_just_a_file(tmp_path):
    folder = tmp_path / "concat:a"
    folder.mkdir()
    path = write_video(folder / "b.mp4", FRAMES)
    assert len(read_frames(path, 2, 16, 0)) == 2


# --- Every surface: library, evaluate module, Space ---


@pytest.mark.parametrize("name", ["list.m3u8", "holiday.mp4"])
def test_emscore_refuses_an_hls_playlist_and_never_reads_the_file_it_names(
    tmp_path, tiny_clip_dir, watched, name
):
    from capeval.emscore import EMScore

    playlist = _hls(tmp_path / name, watched.path)
    scorer = EMScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(
        ValueError, match=rf"video 0 \('.*{name}'\) is not a readable video file: it is an HLS playlist"
    ):
        scorer(["a dog"], videos=[str(playlist)])
    assert not watched.opened()


def test_the_emscore_module_refuses_a_concat_script(tmp_path, tiny_clip_dir, watched):
    import evaluate

    script = tmp_path / "v.mkv"
    script.write_text(f"ffconcat version 1.0\nfile '{watched.path}'\n")
    module = evaluate.load(str(Path(__file__).resolve().parents[1] / "metrics" / "emscore"))
    with pytest.raises(ValueError, match="is not a readable video file: it is an FFmpeg concat script"):
        module.compute(predictions=["a dog"], videos=[str(script)], model=str(tiny_clip_dir), device="cpu")
    assert not watched.opened()


def test_the_space_refuses_an_uploaded_hls_playlist_and_never_reads_the_file_it_names(uploads, watched):
    import gradio as gr
    from gradio.data_classes import FileData

    from capeval.demo.uploads import UploadedVideo

    playlist = _hls(uploads / "list.m3u8", watched.path)
    with pytest.raises(gr.Error, match="The file is not a readable video file: it is an HLS playlist"):
        UploadedVideo().preprocess(FileData(path=str(playlist), orig_name="list.m3u8"))
    assert not watched.opened()


def test_the_emscore_space_panel_refuses_a_playlist(uploads, watched, tiny_clip_dir, monkeypatch):
    from capeval.demo import InputError, get_panel

    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    playlist = _hls(uploads / "list.m3u8", watched.path)
    with pytest.raises(InputError, match="it is an HLS playlist"):
        get_panel("emscore").score(
            video=str(playlist), captions="a dog", model=str(tiny_clip_dir), num_frames=2
        )
    assert not watched.opened()


def test_the_space_still_takes_an_uploaded_mp4(uploads):
    from capeval.demo.uploads import check_video_header

    path = write_video(uploads / "ok.mp4", FRAMES, fps=2)
    assert check_video_header(path) == pytest.approx(2, abs=0.1)
