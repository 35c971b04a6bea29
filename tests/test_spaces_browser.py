"""The six Spaces in a real browser: Debian's Chromium driven by Playwright.

Each test opens a Space's own ``spaces/<metric>/app.py`` in a page of its own; the Space runs in this process on
127.0.0.1 with the shapes CLIP (``CAPEVAL_DEMO_MODEL``; it also serves as the PAC-S checkpoint, a converted
transformers folder), started by the first test that opens it and shared by the others, as visitors share a
Space. A test uploads an example or clicks one, presses Score and checks the numbers shown: with the shapes CLIP the right
caption of a drawing must be ranked first. A screenshot of each Space goes to
``test-output/screenshots/<metric>.png``. One test starts the CLIPScore Space as it runs without the Hub
(nothing configured, ``HF_HUB_OFFLINE=1``): it must fall back to the shapes CLIP under a visible banner
(``test-output/screenshots/clipscore-offline-banner.png``). The limit tests upload what a hostile visitor would and check
the message shown. One browser serves all tests.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from capeval.demo import launch
from capeval.demo.examples import EXAMPLE_SCENES
from capeval.shapes import caption, shapes_clip_path

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
SCREENSHOTS = REPO / "test-output" / "screenshots"
TIMEOUT_MS = 180_000  # generous: CI machines are shared; a healthy run takes seconds


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (scripts/test.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # A persistent context on a fresh folder: Chromium's own --user-data-dir, as Playwright wants it given.
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 1500},
        )
        context.set_default_timeout(TIMEOUT_MS)
        yield context
        context.close()


@pytest.fixture(scope="module")
def shapes_spaces():
    """``spaces/<metric>/app.py`` with the shapes CLIP configured, each started on 127.0.0.1 when a test first
    asks for it and running until the module's tests end: ``{metric: url}``."""
    model = str(shapes_clip_path())
    urls: dict[str, str] = {}
    demos = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CAPEVAL_DEMO_MODEL", model)
        patch.setenv("CAPEVAL_DEMO_CHECKPOINT", model)

        def url_of(metric: str) -> str:
            if metric not in urls:
                demo, urls[metric] = _start_space(metric)
                demos.append(demo)
            return urls[metric]

        yield url_of
    for demo in demos:
        demo.close()


@pytest.fixture
def space(browser, shapes_spaces):
    """Open ``spaces/<metric>/app.py`` (with the shapes CLIP) in a new page."""
    pages = []
    yield lambda metric: _open_page(browser, shapes_spaces(metric), pages)
    for page in pages:
        page.close()


@pytest.fixture
def offline_space(monkeypatch, browser, tmp_path):
    """Start ``spaces/<metric>/app.py`` as a visitor meets it with no Hub: no model configured, the Hub
    switched off (``HF_HUB_OFFLINE=1``, from conftest) and an empty Hugging Face cache."""
    import huggingface_hub

    monkeypatch.delenv("CAPEVAL_DEMO_MODEL", raising=False)
    monkeypatch.delenv("CAPEVAL_DEMO_CHECKPOINT", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    demos, pages = [], []

    def open_space(metric: str):
        demo, url = _start_space(metric)
        demos.append(demo)
        return _open_page(browser, url, pages)

    yield open_space
    for page in pages:
        page.close()
    for demo in demos:
        demo.close()


def _start_space(metric: str):
    """Run ``spaces/<metric>/app.py`` as its Space does and serve it on 127.0.0.1: (demo, url)."""
    demo = runpy.run_path(str(REPO / "spaces" / metric / "app.py"), run_name="space")["demo"]
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    return demo, url


def _open_page(browser, url: str, pages: list):
    page = browser.new_page()
    pages.append(page)
    page.goto(url)
    page.wait_for_selector("#score-button")
    return page


def _screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled")  # a toast sliding in is shown where it ends
    return path


def _score(page) -> list[tuple[str, float]]:
    """Press Score and read the ranked table: (caption, score) best first."""
    page.click("#score-button")
    page.wait_for_selector("#ranked-scores tr[data-rank='1']")
    rows = page.locator("#ranked-scores tbody tr")
    return [(r.get_attribute("data-caption"), float(r.get_attribute("data-score"))) for r in rows.all()]


def _click_example(page, row: int = 0) -> None:
    from playwright.sync_api import expect

    page.locator(f"#examples [data-testid=dataset-cell-{row}-1]").click()
    expect(page.locator("#captions-input textarea")).not_to_have_value("")


def _expect_message(page, text: str) -> None:
    """The text appears in one of Gradio's error toasts."""
    from playwright.sync_api import expect

    expect(page.locator("[data-testid=toast-body]").filter(has_text=text)).to_be_visible()


def test_clipscore_space_ranks_the_right_caption_of_an_uploaded_example_first(space):
    page = space("clipscore")
    # examples/shapes/images/shapes00.png is "a purple triangle at the top" (examples/shapes/candidates.json).
    page.locator("#image-input input[type=file]").set_input_files(
        str(REPO / "examples/shapes/images/shapes00.png")
    )
    right = "a purple triangle at the top"
    wrong = ["a purple square at the top", "a green triangle at the top", "a purple triangle on the left"]
    page.fill("#captions-input textarea", "\n".join([wrong[0], right, *wrong[1:]]))
    ranked = _score(page)
    assert ranked[0][0] == right, ranked
    assert len(ranked) == 4 and all(0 <= s <= 2.5 for _, s in ranked)
    corpus = page.locator("#corpus-score").inner_text()
    assert f"{np.mean([s for _, s in ranked]):.4f}" in corpus and "mean over 4 captions" in corpus
    _screenshot(page, "clipscore")


def test_the_offline_clipscore_space_runs_the_shapes_clip_under_a_banner_and_scores(offline_space):
    from playwright.sync_api import expect

    from capeval.demo.models import SHAPES_BANNER

    page = offline_space("clipscore")
    banner = page.locator("#demo-banner")
    expect(banner).to_be_visible()
    assert banner.inner_text().strip().startswith(f"\u26a0 {SHAPES_BANNER}")
    # A visitor is told what happened in words, not with the resolver's errno (that stays in the server log).
    assert "has no copy of the paper's CLIP (openai/clip-vit-base-patch32)" in banner.inner_text()
    assert "Errno" not in banner.inner_text()
    placeholder = page.locator("#captions-input textarea").get_attribute("placeholder")
    assert placeholder.splitlines()[0] == "a red circle on the left"  # a caption the shapes CLIP knows
    header = page.locator("#demo-header").inner_text()
    assert "the right caption of a drawing scores 2.35 to 2.48" in header and "ViT-B/32" not in header
    _click_example(page, 0)
    ranked = _score(page)
    assert ranked[0][0] == caption(EXAMPLE_SCENES[0]), ranked
    assert 2.35 <= ranked[0][1] <= 2.48  # within the range the header states
    assert "mean over 4 captions" in page.locator("#corpus-score").inner_text()
    _screenshot(page, "clipscore-offline-banner")


def test_refclipscore_space_ranks_the_right_caption_first_with_references(space):
    page = space("refclipscore")
    _click_example(page, 1)
    ranked = _score(page)
    assert ranked[0][0] == caption(EXAMPLE_SCENES[1]), ranked
    assert "CLIP-S" in page.locator("#corpus-score").inner_text()
    _screenshot(page, "refclipscore")


def test_pacscore_space_scores_pac_s_and_refpac_s(space):
    page = space("pacscore")
    _click_example(page, 2)
    ranked = _score(page)
    assert ranked[0][0] == caption(EXAMPLE_SCENES[2]), ranked
    assert "RefPAC-S" in page.locator("#corpus-score").inner_text()
    _screenshot(page, "pacscore")


def test_wmd_space_ranks_the_paraphrase_first_and_shows_the_word_flows(space):
    page = space("wmd")
    _click_example(page, 0)
    ranked = _score(page)
    assert ranked[0][0] == "a man is riding a horse on the beach", ranked
    flows = page.locator("#flows-table")
    assert "horse" in flows.inner_text() and "mass moved" in flows.inner_text()
    page.wait_for_selector("#flows-plot [data-testid=matplotlib] img")
    _screenshot(page, "wmd")


def test_wembsim_space_shows_per_reference_cosines(space):
    page = space("wembsim")
    _click_example(page, 1)
    ranked = _score(page)
    assert ranked[-1][0] == "a cat sits on a wall", ranked
    header = page.locator("#ranked-scores thead").inner_text()
    assert "ref 1" in header and "ref 2" in header
    page.wait_for_selector("#cosines-plot [data-testid=matplotlib] img")
    _screenshot(page, "wembsim")


def test_emscore_space_ranks_the_right_caption_of_a_clip_first_and_draws_the_heatmap(space):
    page = space("emscore")
    _click_example(page, 0)
    ranked = _score(page)
    assert ranked[0][0] == caption(EXAMPLE_SCENES[0]), ranked
    assert "EMScore(X,V,X*)" in page.locator("#corpus-score").inner_text()
    page.wait_for_selector("#similarity-plot [data-testid=matplotlib] img")
    _screenshot(page, "emscore")


# -- limits, as a visitor meets them ---------------------------------------------------------------


def test_an_upload_over_the_size_limit_is_refused_in_the_browser(space, tmp_path):
    page = space("clipscore")
    noise = np.random.default_rng(0).integers(0, 256, (1900, 1900, 3), dtype=np.uint8)
    big = tmp_path / "noise.bmp"
    Image.fromarray(noise).save(big)  # 10.8 MB > 10 MB
    page.locator("#image-input input[type=file]").set_input_files(str(big))
    _expect_message(page, 'exceed the maximum allowed size of 10.0 Mb: "noise.bmp"')
    _screenshot(page, "limit-upload-size")


def test_an_image_over_the_pixel_limit_is_a_message(space, tmp_path):
    page = space("clipscore")
    bomb = tmp_path / "bomb.png"
    Image.new("L", (6000, 6000), 255).save(bomb)  # 36 megapixels in a few kilobytes
    page.locator("#image-input input[type=file]").set_input_files(str(bomb))
    page.fill("#captions-input textarea", "a white square")
    page.click("#score-button")
    _expect_message(page, "36.0 megapixels")
    _screenshot(page, "limit-image-pixels")


def test_a_video_over_the_length_limit_is_a_message(space, tmp_path):
    from capeval.clip.video import write_video

    page = space("emscore")
    long_clip = write_video(tmp_path / "long.mp4", [np.zeros((32, 32, 3), np.uint8)] * 40, fps=1)  # 40 s
    page.locator("#video-input input[type=file]").set_input_files(str(long_clip))
    page.fill("#captions-input textarea", "a black screen")
    page.click("#score-button")
    _expect_message(page, "at most 30 s")
    _screenshot(page, "limit-video-length")


def test_an_eps_file_named_jpg_is_refused_by_format_in_the_browser(space, tmp_path):
    page = space("clipscore")
    eps = tmp_path / "holiday.jpg"
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\nshowpage\n")
    page.locator("#image-input input[type=file]").set_input_files(str(eps))
    page.fill("#captions-input textarea", "a holiday")
    page.click("#score-button")
    _expect_message(page, "The image is in the EPS format")
    _screenshot(page, "refused-eps-image")


def test_an_hls_playlist_is_refused_by_name_in_the_browser(space, tmp_path):
    page = space("emscore")
    # The page itself takes only video file types: a playlist arrives named as a video.
    playlist = tmp_path / "clip.mp4"
    playlist.write_text("#EXTM3U\n#EXTINF:10,\n/etc/hostname\n#EXT-X-ENDLIST\n")
    page.locator("#video-input input[type=file]").set_input_files(str(playlist))
    page.fill("#captions-input textarea", "a clip")
    page.click("#score-button")
    _expect_message(page, "it is an HLS playlist")
    _screenshot(page, "refused-hls-playlist")


def test_too_many_captions_is_a_message(space):
    page = space("wmd")
    page.fill("#captions-input textarea", "\n".join(f"caption number {i}" for i in range(17)))
    page.fill("#references-input textarea", "a reference")
    page.click("#score-button")
    _expect_message(page, "17 captions given; this demo scores at most 16")
