"""CLIPScore Space: the shared capeval demo (capeval.demo) for the clipscore metric."""

from pathlib import Path

from capeval.demo import build_demo, launch

demo = build_demo("clipscore", card=Path(__file__).with_name("README.md"))

if __name__ == "__main__":
    launch(demo)
