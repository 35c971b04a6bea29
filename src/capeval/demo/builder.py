"""The one Gradio UI every capeval Space uses: inputs, a Score button, ranked scores, options, the card.

A metric plugs in a ``Panel`` (``capeval.demo.panel``: its inputs, options, extra outputs, examples and
scoring function), found by name in ``capeval.demo.panels``; the builder lays them out the same way for every metric, bounds the queue, turns every failure into a short
message for the visitor (never a stack trace) and reads the metric card shown under the demo.
"""

from __future__ import annotations

import html
import logging
import re
from pathlib import Path

import gradio as gr

from capeval.demo.limits import DEFAULT_LIMITS, Limits
from capeval.demo.panel import Panel
from capeval.demo.panels import get_panel
from capeval.demo.render import corpus_line, ranked_table

logger = logging.getLogger(__name__)
# A server path starts a word: the "/" inside a Hub id ("openai/clip-vit-base-patch32") or a URL is kept.
_PATH = re.compile(r"(?<![\w.@+~:/\\-])(?:[A-Za-z]:)?(?:[/\\][\w.@+~-]+)+[/\\]?")
_BANNER_STYLE = (
    "background:#fff3cd;color:#664d03;border:2px solid #e0a800;border-radius:6px;padding:10px 14px;"
    "font-size:1.05em"
)
_FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.S)


def visitor_message(err: BaseException) -> str:
    """The error's message with server paths cut to their last component."""
    text = str(err) or type(err).__name__
    return _PATH.sub(lambda m: Path(m.group(0).rstrip("/\\")).name or m.group(0), text)


def read_card(metric: str, card: str | Path | None = None) -> str:
    """The metric card's Markdown without its Space front matter (``""`` when there is none)."""
    if card is None or not Path(card).is_file():
        from capeval.integrations.evaluate_modules import module_path

        try:
            card = module_path(metric) / "README.md"
        except ValueError:
            return ""
    path = Path(card)
    if not path.is_file():
        return ""
    return _FRONT_MATTER.sub("", path.read_text(encoding="utf-8"), count=1)


def _make_handler(panel: Panel, names: list[str], extra_names: list[str]):
    def score(*values):
        kwargs = dict(zip(names, values, strict=True))
        try:
            scored = panel.score(**kwargs)
        except gr.Error:
            raise
        except (ValueError, TypeError, OSError, ImportError) as err:
            # capeval's input errors name the item and the reason: that is what the visitor needs.
            raise gr.Error(visitor_message(err)) from None
        except Exception:
            logger.exception("capeval demo %s: scoring failed", panel.metric)
            raise gr.Error("Scoring failed unexpectedly; the error was logged on the server.") from None
        headline = scored.headline or panel.headline
        corpus = corpus_line(headline, scored.corpus, len(scored.rows), scored.corpus_extra)
        table = ranked_table(scored.rows, headline, panel.scale)
        extras = [scored.extras.get(name) for name in extra_names]
        return [corpus, table, *extras, scored.result]

    return score


def build_demo(
    metric: str | Panel, limits: Limits = DEFAULT_LIMITS, card: str | Path | None = None
) -> gr.Blocks:
    """The Gradio app of one metric.

    Args:
        metric: a metric name (``"clipscore"``...) or a ``Panel``.
        limits: safety limits (upload size, pixels, video length, queue, caption counts).
        card: the metric card to show below the demo (default: the packaged card of the metric).

    Returns:
        gr.Blocks: queued with bounded concurrency; start it with ``capeval.demo.launch``.
    """

    panel = get_panel(metric, limits) if isinstance(metric, str) else metric
    card_text = read_card(panel.metric, card)
    with gr.Blocks(title=f"{panel.title} (capeval)", analytics_enabled=False) as demo:
        gr.Markdown(f"# {panel.title}\n{panel.header()}", elem_id="demo-header")
        banner = panel.banner()
        if banner:
            gr.HTML(
                f'<div role="alert" style="{_BANNER_STYLE}"><b>&#9888; {html.escape(banner)}</b></div>',
                elem_id="demo-banner",
            )
        notice = panel.notice()
        if notice:
            gr.Markdown(notice, elem_id="demo-notice")
        with gr.Row():
            with gr.Column(scale=1):
                inputs = panel.build_inputs()
                button = gr.Button("Score", variant="primary", elem_id="score-button")
            with gr.Column(scale=1):
                corpus = gr.Markdown("Scores appear here.", elem_id="corpus-score")
                table = gr.HTML(elem_id="ranked-scores")
                extras = panel.build_extra_outputs()
        example_names, example_rows = panel.examples()
        if example_rows:
            gr.Examples(
                examples=example_rows,
                inputs=[inputs[n] for n in example_names],
                label="Examples: click one, then Score",
                elem_id="examples",
            )
        with gr.Accordion("Model and options", open=False, elem_id="options"):
            options = panel.build_options()
        with gr.Accordion("Raw result (with the signature to report)", open=False):
            raw = gr.JSON(elem_id="raw-result")
        if card_text:
            gr.Markdown(card_text, elem_id="metric-card")
        names = [*inputs, *options]
        button.click(
            _make_handler(panel, names, list(extras)),
            inputs=[*inputs.values(), *options.values()],
            outputs=[corpus, table, *extras.values(), raw],
            api_name="score",
            concurrency_id="score",
            concurrency_limit=limits.concurrency,
        )
    demo.queue(max_size=limits.queue_size, default_concurrency_limit=limits.concurrency)
    demo.capeval_panel = panel
    return demo


def launch(demo: gr.Blocks, **kwargs):
    """``demo.launch`` with the demo's upload limit and without server error details.

    Args:
        demo: from ``build_demo``.
        **kwargs: passed to ``gr.Blocks.launch`` (``server_name``, ``server_port``, ``prevent_thread_lock``...).
    """
    panel: Panel = demo.capeval_panel
    kwargs.setdefault("max_file_size", panel.max_file_size)
    kwargs.setdefault("show_error", False)
    return demo.launch(**kwargs)
