"""CLIPScore Space: the shared capeval demo (capeval.demo) for the clipscore metric.

Run locally with `python spaces/clipscore/app.py`; published, this file sits beside the metric card (README.md,
whose front matter configures the Space) and clipscore.py, so evaluate.load("<org>/clipscore") works too.
"""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("clipscore", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
