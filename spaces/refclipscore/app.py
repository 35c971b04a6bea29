"""RefCLIPScore Space: the shared capeval demo (capeval.demo) for the refclipscore metric.

Run locally with `python spaces/refclipscore/app.py`; published, this file sits beside the metric card (README.md,
whose front matter configures the Space) and refclipscore.py, so evaluate.load("<org>/refclipscore") works too.
"""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("refclipscore", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
