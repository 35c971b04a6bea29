#!/usr/bin/env python
"""Video decoding speed for EMScore: capeval.clip.video against decoding and converting every frame.

Writes a synthetic H.264 clip (moving shapes over a gradient, 30 fps), then times, interleaved and repeated
(medians reported):

- ``sampled``: ``decode_video(path, num_frames=10)``: every frame decoded, only the 10 sampled converted to
  RGB and resized (the VATEX-EVAL protocol);
- ``every``: ``decode_video(path, None)``: every frame decoded, converted and resized (the library default);
- ``peer``: what the authors' loop does for 10 frames (OpenCV there): convert every decoded frame to an RGB
  array, resize them all, then keep 10;
- ``decode only``: FFmpeg decoding without any conversion (the floor).

Frames/s counts the frames of the video (decoded), not only the kept ones. The machine may be shared: the
load average is printed with the results.

    python scripts/bench_video.py --width 640 --height 360 --seconds 10 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def synthetic_clip(path: Path, width: int, height: int, n: int, fps: int = 30) -> Path:
    from capeval.clip.video import write_video

    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([(xx * 255 // max(width - 1, 1)), (yy * 255 // max(height - 1, 1)), (xx + yy) % 256], -1)
    frames = []
    for i in range(n):
        a = base.astype(np.uint8).copy()
        x = (i * 7) % max(width - 60, 1)
        y = (i * 3) % max(height - 60, 1)
        a[y : y + 60, x : x + 60] = (220, 40, 40)
        a[(y + 100) % height : (y + 100) % height + 30, :40] = (30, 30, 200)
        frames.append(a)
    return write_video(path, frames, fps=fps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=224, help="model input size the frames are resized to")
    parser.add_argument("--num-frames", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--video", help="time this file instead of a synthetic clip")
    args = parser.parse_args(argv)

    import av
    from PIL import Image

    from capeval.clip.images import resize_and_crop
    from capeval.clip.video import decode_video, sample_indices

    with tempfile.TemporaryDirectory() as tmp:
        if args.video:
            path = Path(args.video)
        else:
            path = synthetic_clip(Path(tmp) / "clip.mp4", args.width, args.height, int(30 * args.seconds))
        with av.open(str(path)) as c:
            n = sum(1 for _ in c.decode(video=0))

        def sampled():
            return decode_video(path, args.num_frames, args.size)

        def every():
            return decode_video(path, None, args.size)

        def peer():
            with av.open(str(path)) as c:
                s = c.streams.video[0]
                s.thread_type = "AUTO"
                frames = [
                    resize_and_crop(Image.fromarray(f.to_ndarray(format="rgb24")), args.size)
                    for f in c.decode(s)
                ]
            return [frames[i] for i in sample_indices(len(frames), args.num_frames)]

        def decode_only():
            with av.open(str(path)) as c:
                s = c.streams.video[0]
                s.thread_type = "AUTO"
                return sum(1 for _ in c.decode(s))

        runs = {"sampled": sampled, "every": every, "peer": peer, "decode only": decode_only}
        times: dict[str, list[float]] = {k: [] for k in runs}
        for fn in runs.values():
            fn()  # warm-up (file cache, codec init)
        for _ in range(args.repeats):
            for name, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    print(f"video: {path.name if args.video else f'synthetic H.264 {args.width}x{args.height}'}, {n} frames")
    print(f"cpus: {os.cpu_count()}, load average: {load}, repeats: {args.repeats} (medians)\n")
    print("| run | s per video | video frames/s | vs peer |")
    print("|---|---|---|---|")
    peer_t = statistics.median(times["peer"])
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"| {name} | {t:.3f} | {n / t:.0f} | {peer_t / t:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
