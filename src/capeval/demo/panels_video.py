"""Panel of the video metric EMScore: a short video (or its frames), candidate captions, optional references.

The variant follows the inputs as in the metric: video only -> EMScore(X,V), references only ->
EMScore(X,X*), both -> EMScore(X,V,X*). Beside the ranking, a heatmap shows the cosine of every token of
the best caption with every sampled frame: the similarities EMScore's fine-grained matching works on.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np

from capeval.demo.limits import InputError, check_texts, split_lines
from capeval.demo.panel import ModelPanel, Scored, choice_dropdown
from capeval.demo.render import Row, heatmap
from capeval.demo.uploads import (
    UploadedFrames,
    UploadedVideo,
    check_image_header,
    check_request_pixels,
    check_resized,
    check_uploaded_file,
    check_video_header,
    video_frame_size,
)

DEMO_NUM_FRAMES = 16  # frames sampled by default in the demo (the library default is every frame)


def token_labels(tokenizer, ids) -> list[str]:
    """Readable labels of CLIP token ids: words without the end-of-word mark, start/end markers."""
    labels = []
    for tok in tokenizer.convert_ids_to_tokens(list(ids)):
        if tok == tokenizer.bos_token:
            labels.append("<start>")
        elif tok == tokenizer.eos_token:
            labels.append("<end>")
        else:
            labels.append(tok.replace("</w>", ""))
    return labels


def token_frame_similarity(scorer, clip, text: str) -> tuple[list[str], np.ndarray]:
    """Token labels and the (tokens, frames) cosines of ``text`` with the sampled frames of ``clip``.

    The same embeddings EMScore's fine-grained matching compares: CLIP token embeddings from start- to
    end-of-text (no prompt) and the frames sampled by the scorer's ``num_frames``.
    """
    from capeval.clip.text_encoding import encode_text_tokens

    frames = scorer.frame_embeddings([clip], None, 1)[0]
    _, tokens, ids = encode_text_tokens(scorer.backbone, [text], prefix=None)
    sim = (tokens[0].float() @ frames.float().T).numpy()
    return token_labels(scorer.backbone.tokenizer, ids[0]), sim


class EMScorePanel(ModelPanel):
    metric = "emscore"
    title = "EMScore"
    headline = "EMScore"
    summary = (
        "Upload a short video (or its frames as images) and type candidate captions, one per line; add "
        "references if you have them. EMScore matches the caption with the video coarsely (whole caption vs "
        "whole video) and finely (each word vs each frame) in CLIP's space; higher is better. The heatmap "
        "shows, for the best caption, how similar each token is to each frame."
    )

    @property
    def max_file_size(self) -> int:
        return self.limits.max_video_file_size

    def build_inputs(self) -> dict:
        with gr.Tabs():
            with gr.Tab("Video"):
                video = UploadedVideo(
                    label="Video (short)", limits=self.limits, elem_id="video-input", height=240
                )
            with gr.Tab("Frames"):
                frames = UploadedFrames(
                    label=f"Frames as images, in order (at most {self.limits.max_frames})",
                    limits=self.limits,
                    elem_id="frames-input",
                )
        return {
            "video": video,
            "frames": frames,
            "captions": gr.Textbox(
                label="Candidate captions (one per line)", lines=4, elem_id="captions-input"
            ),
            "references": gr.Textbox(
                label="Reference captions (one per line, optional)", lines=2, elem_id="references-input"
            ),
        }

    def build_options(self) -> dict:
        return {
            "model": choice_dropdown(self.model_choices(), "CLIP model", "model-option"),
            "num_frames": gr.Slider(
                1,
                self.limits.max_frames,
                value=min(DEMO_NUM_FRAMES, self.limits.max_frames),
                step=1,
                label="Frames sampled per video (evenly spaced)",
            ),
            "idf": gr.Checkbox(
                value=True, label="IDF token weights (from the references, else the candidates)"
            ),
        }

    def build_extra_outputs(self) -> dict:
        return {
            "similarity_plot": gr.Plot(
                label="Token-by-frame similarity", show_label=False, elem_id="similarity-plot"
            )
        }

    def examples(self) -> tuple[list[str], list[list]]:
        from capeval.demo.examples import EXAMPLE_SCENES, candidate_captions, example_video, references_for

        rows = [
            [str(example_video(s)), "\n".join(candidate_captions(s)), "\n".join(references_for(s))]
            for s in EXAMPLE_SCENES[:2]
        ]
        return ["video", "captions", "references"], rows

    def _video_input(self, video, frames):
        if video and frames:
            raise InputError("Give a video or frames, not both (clear one of them).")
        if video:
            path = check_uploaded_file(video, self.limits.max_video_file_size, "video")
            check_video_header(path, self.limits)
            return str(path)
        if frames:
            if len(frames) > self.limits.max_frames:
                raise InputError(
                    f"{len(frames)} frames given; this demo accepts at most {self.limits.max_frames}."
                )
            paths = []
            for i, p in enumerate(frames):
                path = check_uploaded_file(p, self.limits.max_file_size, f"frame {i + 1}")
                check_image_header(path, self.limits, f"frame {i + 1}")
                paths.append(str(path))
            return paths
        return None

    def _check_work(self, clip, num_frames: int, size: int) -> None:
        """Refuse a request whose sampled frames, each read once, would handle too many pixels.

        Frames given as images: each distinct sampled file, decoded and resized for the model's input ``size``.
        A video: at most ``num_frames`` sampled frames, each converted and resized (its decoding is bounded by
        ``max_video_seconds`` and ``max_video_pixels``).
        """
        from capeval.clip.video import sample_indices

        if isinstance(clip, list):
            total = 0
            for j in sorted(set(sample_indices(len(clip), num_frames))):
                what = f"frame {j + 1}"
                width, height = check_image_header(Path(clip[j]), self.limits, what)
                total += check_resized(width, height, size, self.limits, what)
            check_request_pixels(total, self.limits, f"The {len(clip)} frames sampled {num_frames} times")
        elif clip is not None:
            width, height = video_frame_size(Path(clip))
            if width and height:
                per_frame = check_resized(width, height, size, self.limits, "video's frames")
                check_request_pixels(
                    per_frame * num_frames, self.limits, f"{num_frames} frames of this video"
                )

    def score(
        self, video=None, frames=None, captions="", references="", model=None, num_frames=16, idf=True
    ) -> Scored:
        from capeval.emscore import EMScore

        clip = self._video_input(video, frames)
        cands = check_texts(split_lines(captions), "caption", self.limits.max_captions, self.limits)
        refs = check_texts(
            split_lines(references), "reference", self.limits.max_references, self.limits, required=False
        )
        if clip is None and not refs:
            raise InputError("Upload a video (or frames), type references, or both.")
        if num_frames is None or not 1 <= int(num_frames) <= self.limits.max_frames:
            raise InputError(f"Frames per video must be between 1 and {self.limits.max_frames}.")
        scorer = self.scorer(
            model, lambda spec: EMScore(model=spec, num_frames=int(num_frames), idf=bool(idf))
        )
        self._check_work(clip, int(num_frames), scorer.backbone.image_size)
        n = len(cands)
        result = scorer(cands, [refs] * n if refs else None, videos=[clip] * n if clip is not None else None)
        details = result["details"][result["variant"]]
        rows = [
            Row(c, result["scores"][i], {"fine F": details["figr_F"][i], "coarse": details["cogr"][i]})
            for i, c in enumerate(cands)
        ]
        plot = None
        if clip is not None:
            best = max(range(n), key=lambda i: result["scores"][i])
            labels, sim = token_frame_similarity(scorer, clip, cands[best])
            plot = heatmap(
                sim,
                labels,
                [f"f{k + 1}" for k in range(sim.shape[1])],
                f"Cosine of each token with each frame: {cands[best][:60]}",
                "sampled frames",
                "caption tokens",
                annotate=sim.size <= 200,
            )
        return Scored(
            rows=rows,
            corpus=result["emscore"],
            extras={"similarity_plot": plot},
            result=result,
            headline=result["variant"],
        )
