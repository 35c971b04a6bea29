"""WMD Space: the shared capeval demo (capeval.demo) for the wmd metric.

Run locally with `python spaces/wmd/app.py`; published, this file sits beside the metric card (README.md,
whose front matter configures the Space) and wmd.py, so evaluate.load("<org>/wmd") works too.
"""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("wmd", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
