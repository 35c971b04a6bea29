"""PAC-S Space: the shared capeval demo (capeval.demo) for the pacscore metric.

Run locally with `python spaces/pacscore/app.py`; published, this file sits beside the metric card (README.md,
whose front matter configures the Space) and pacscore.py, so evaluate.load("<org>/pacscore") works too.
"""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("pacscore", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
