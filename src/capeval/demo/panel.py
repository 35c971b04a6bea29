"""What a metric gives the demo builder: a ``Panel`` (inputs, options, outputs, examples, scoring) and the
``Scored`` result of its scoring. Panels import this module, never the builder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from capeval.demo.limits import DEFAULT_LIMITS, Limits
from capeval.demo.render import Row


@dataclass
class Scored:
    """What a panel's scoring returns to the builder.

    Attributes:
        rows: one per caption (shown ranked).
        corpus: the headline corpus score.
        corpus_extra: other corpus figures shown next to it (name -> value).
        extras: values of the panel's extra outputs, by name.
        result: the metric's raw result dict (shown under "Raw result").
        headline: name of the headline score when it depends on the inputs (else the panel's).
    """

    rows: list[Row]
    corpus: float
    corpus_extra: dict[str, float] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    result: dict = field(default_factory=dict)
    headline: str | None = None


class Panel:
    """One metric's part of the demo. Subclasses set the class attributes and implement the methods."""

    metric: str = ""
    title: str = ""
    headline: str = ""  # column header and name of the headline score
    summary: str = ""  # two sentences: what to give, how to read the numbers
    scale: float | None = 1.0  # a score of this value fills the bar; None: the best score of the table

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits

    @property
    def max_file_size(self) -> int:
        return self.limits.max_file_size

    def build_inputs(self) -> dict[str, gr.components.Component]:
        raise NotImplementedError

    def build_options(self) -> dict[str, gr.components.Component]:
        return {}

    def build_extra_outputs(self) -> dict[str, gr.components.Component]:
        return {}

    def examples(self) -> tuple[list[str], list[list[Any]]]:
        """Names of the inputs the examples fill, and the example rows."""
        return [], []

    def notice(self) -> str | None:
        """A warning shown above the inputs (e.g. PAC-S weights missing), or ``None``."""
        return None

    def score(self, **values) -> Scored:
        raise NotImplementedError


def choice_dropdown(choices: list, label: str, elem_id: str) -> gr.Dropdown:
    """A dropdown over a fixed list of choices: the browser sees only their keys, never paths or Hub ids."""
    return gr.Dropdown(
        choices=[(c.label, c.key) for c in choices],
        value=choices[0].key if choices else None,
        label=label,
        elem_id=elem_id,
    )
