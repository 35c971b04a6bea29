"""What a metric gives the demo builder: a ``Panel`` (inputs, options, outputs, examples, scoring) and the
``Scored`` result of its scoring. Panels import this module, never the builder."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import gradio as gr

from capeval.demo.limits import DEFAULT_LIMITS, Limits
from capeval.demo.render import Row

if TYPE_CHECKING:
    from capeval.demo.models import ModelPlan


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

    def banner(self) -> str | None:
        """A warning shown at the top of the page about the model in use (plain text), or ``None``."""
        return None

    def header(self) -> str:
        """The sentences under the title: what to give and how to read the numbers."""
        return self.summary

    def score(self, **values) -> Scored:
        raise NotImplementedError


class ModelPanel(Panel):
    """A panel that scores with a CLIP chosen from ``capeval.demo.models``: decided once, on first use."""

    @cached_property
    def model_plan(self) -> ModelPlan:
        from capeval.demo.models import decide_model, log_plan

        plan = decide_model()
        log_plan(plan, self.metric)
        return plan

    def model_choices(self) -> list:
        from capeval.demo.models import model_choices

        return model_choices(self.model_plan)

    def banner(self) -> str | None:
        from capeval.demo.models import banner

        return banner(self.model_plan)

    def scorer(self, key: str | None, make):
        """``make(spec)`` for the model the visitor chose, refused at once when it cannot be had."""
        from capeval.demo.choices import resolve
        from capeval.demo.models import check_loadable, loading

        offered = self.model_choices()
        spec = resolve(offered, key, "model").spec
        check_loadable(spec, offered)
        with loading(spec, offered):
            return make(spec)


def choice_dropdown(choices: list, label: str, elem_id: str) -> gr.Dropdown:
    """A dropdown over a fixed list of choices: the browser sees only their keys, never paths or Hub ids."""
    return gr.Dropdown(
        choices=[(c.label, c.key) for c in choices],
        value=choices[0].key if choices else None,
        label=label,
        elem_id=elem_id,
    )
