"""WEmbSim Space: the shared capeval demo (capeval.demo) for the wembsim metric.

Run locally with `python spaces/wembsim/app.py`; published, this file sits beside the metric card (README.md,
whose front matter configures the Space) and wembsim.py, so evaluate.load("<org>/wembsim") works too.
"""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("wembsim", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
