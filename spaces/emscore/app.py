"""EMScore Space: the shared capeval demo (capeval.demo) for the emscore metric.

Run locally with `python spaces/emscore/app.py`; published, this file sits beside the metric card (README.md,
whose front matter configures the Space) and emscore.py, so evaluate.load("<org>/emscore") works too.
"""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("emscore", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
