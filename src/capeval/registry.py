"""The metrics capeval offers: how each is declared (``MetricSpec``), and the declarations by name.

Each metric module (``capeval/clipscore.py``, ...) ends with ``SPECS``: the ``MetricSpec`` of each metric it
defines, naming its class, the inputs it reads, its result keys, whether its per-item scores stand alone
(``per_item``) or depend on the whole call (IDF), its options (default, where the default comes from, whether it
changes the numbers and so enters the signature, whether the evaluate module takes it) and the scores it offers
to tables (``Output``: ``pacscore`` offers PAC-S and RefPAC-S). Every interface that turns a metric name into a
scorer, a column, a flag or a feature (the evaluate modules, the torchmetrics classes, the Trainer hook, the CLI,
``capeval bench``, ``capeval score``, the corpus engines, the Spaces) reads them here and keeps no table of its
own. ``register`` adds one more (a plug-in, or a test's toy metric): every interface then offers it.
``tests/test_metric_spec.py`` checks each spelled-out signature (the callables, ``_compute``, the torchmetrics
``__init__``) and the modules' features against the declarations.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

INPUT_KINDS = ("images", "videos", "references")
_EMBEDS = {"images": "image_embeds", "videos": "video_embeds"}
# How often an input is read: "required" (every call), "optional" (used when given), "none".
READS = ("required", "optional", "none")


@dataclass(frozen=True)
class Option:
    """One option of a metric.

    Attributes:
        name: the keyword (``w``), the same in the callable, the module, torchmetrics and the CLI (``--w``).
        default: its default in the callable.
        source: where the default comes from (``"Hessel et al. 2021, sec. 3"``, ``"capeval"``).
        signed: it changes the numbers, so it enters the signature.
        in_module: the evaluate module's ``compute`` (and ``evaluate.load``) takes it; engine settings such as
            ``num_workers`` and ``progress`` are left to the plain API.
        run_wide: an option of a whole run (a CLI flag, a benchmark's or a corpus's option) of this name reaches
            it; False where the name means something else here (CLIPScore's ``checkpoint`` is other weights for
            its CLIP, while a run's ``--checkpoint`` names PAC-S weights).
        required: why the metric cannot run without it (``"the authors' weights"``), or None when it has a
            default.
    """

    name: str
    default: Any
    source: str
    signed: bool = True
    in_module: bool = True
    run_wide: bool = True
    required: str | None = None


@dataclass(frozen=True)
class Output:
    """A score a metric offers to tables (``capeval bench``, ``capeval score``, corpus columns).

    Attributes:
        key: its key in tables, caches and ``published.json`` (``refpacscore``).
        display: its name in tables (``RefPAC-S``).
        scores: the result key holding its per-item values (``refpacscore_scores``).
        uses_references, uses_images: what scoring it reads.
        column: its column in the CLIPScore authors' per-image file (``--save_per_instance``), else ``display``.
        note: what ``capeval bench`` fills with it, in words.
    """

    key: str
    display: str
    scores: str = "scores"
    uses_references: bool = False
    uses_images: bool = False
    column: str | None = None
    note: str = ""


@dataclass(frozen=True)
class MetricSpec:
    """The declaration of one metric.

    Attributes:
        name: folder, Hub id and headline result key (``clipscore``).
        label: readable name in messages (``CLIPScore``).
        scorer: the plain-API class.
        images, videos, references: how each input is read (``READS``); precomputed embeddings stand in for
            required images or videos.
        result_keys: the keys of the result dict, ``signature`` last.
        per_item: each item's score depends only on that item (shards and batches can cut a corpus anywhere);
            False where IDF weights come from the whole call.
        options: every constructor option of ``scorer``, in its order.
        outputs: the scores it offers to tables (default: one, under ``name``).
        families: the backbone it encodes with: ``"clip"`` (an image-text model) or ``"vectors"`` (word vectors).
        row_columns: per-item values the corpus engines write beside the headline (``clip_s`` for RefCLIP-S:
            the result's ``clip_s_scores``).
        extra: the extra it cannot run without (``"text"`` for the word-vector metrics); None: the core suffices.
    """

    name: str
    label: str
    scorer: type
    result_keys: tuple[str, ...]
    options: tuple[Option, ...]
    images: str = "none"
    videos: str = "none"
    references: str = "none"
    per_item: bool = True
    outputs: tuple[Output, ...] = field(default_factory=tuple)
    families: str = "clip"
    row_columns: tuple[str, ...] = ()
    extra: str | None = None

    def __post_init__(self) -> None:
        for kind in INPUT_KINDS:
            if getattr(self, kind) not in READS:
                raise ValueError(f"{self.name}: {kind} must be one of {READS}, got {getattr(self, kind)!r}")

    @property
    def media(self) -> str | None:
        """The image or video input the evaluate module stores losslessly, if any."""
        return next((kind for kind in ("images", "videos") if getattr(self, kind) != "none"), None)

    def reads(self, kind: str) -> bool:
        """Whether scoring uses the input ``kind`` when it is given."""
        return getattr(self, kind) != "none"

    def needs(self, kind: str) -> bool:
        """Whether every call must give ``kind`` (or, for images and videos, their embeddings)."""
        return getattr(self, kind) == "required"

    def option(self, name: str) -> Option:
        """The option called ``name``.

        Raises:
            KeyError: no such option, naming the options there are.
        """
        for option in self.options:
            if option.name == name:
                return option
        raise KeyError(f"{self.name} has no option {name!r}; its options: {[o.name for o in self.options]}")

    def option_names(self, in_module: bool = False) -> tuple[str, ...]:
        """The option names, in order; ``in_module``: only those the evaluate module takes."""
        return tuple(o.name for o in self.options if o.in_module or not in_module)

    def run_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options of a whole run that this metric takes (``run_wide`` ones it declares)."""
        taken = {o.name for o in self.options if o.run_wide}
        return {name: value for name, value in options.items() if name in taken}

    def defaults(self) -> dict[str, Any]:
        """``{option: default}`` of the plain API."""
        return {o.name: o.default for o in self.options}

    def tables(self) -> tuple[Output, ...]:
        """The scores offered to tables: ``outputs``, or one under the metric's own name."""
        if self.outputs:
            return self.outputs
        return (
            Output(
                key=self.name,
                display=self.label,
                uses_references=self.reads("references"),
                uses_images=self.reads("images"),
            ),
        )

    def module_inputs(self) -> tuple[str, ...]:
        """The inputs ``_compute`` names: every module takes the others' too, so ``evaluate.combine`` works."""
        return ("references", "images", "image_embeds", "videos", "video_embeds")


def embeds_of(kind: str) -> str:
    """The precomputed-embeddings keyword of a media input (``images`` -> ``image_embeds``)."""
    return _EMBEDS[kind]


# The modules that declare capeval's metrics (``SPECS`` in each), in the order interfaces list them. A metric's
# declaration lives in the module of its name (``capeval.wmd``) or in the one before it builds on (RefCLIP-S in
# ``capeval.clipscore``): asking for one metric imports its module alone, and the first module for those it holds
# besides its own (WMD's brings scipy and gensim, EMScore's the video reader).
SPEC_MODULES = ("capeval.clipscore", "capeval.pacscore", "capeval.wembsim", "capeval.wmd", "capeval.emscore")
# The modules whose metrics read no image: lists of image metrics leave them out without importing them (they bring
# the text libraries). tests/test_metric_spec.py checks that their metrics read no image.
TEXT_ONLY_MODULES = ("capeval.wembsim", "capeval.wmd")

_registered: dict[str, MetricSpec] = {}
_declared: dict[str, tuple[MetricSpec, ...]] = {}  # a module's SPECS, once it is imported


def _declarations(module: str) -> tuple[MetricSpec, ...]:
    if module not in _declared:
        _declared[module] = tuple(import_module(module).SPECS)
    return _declared[module]


def _shipped(modules=SPEC_MODULES) -> dict[str, MetricSpec]:
    """The declarations of ``modules`` (each imported), in their order."""
    return {declared.name: declared for module in modules for declared in _declarations(module)}


def specs() -> dict[str, MetricSpec]:
    """``{name: MetricSpec}`` of every metric: capeval's in their modules' order (each module imported), then those
    registered."""
    return {**_shipped(), **_registered}


def metric_names() -> tuple[str, ...]:
    """The metric names, in order (capeval's, then those registered)."""
    return tuple(specs())


def spec(name: str) -> MetricSpec:
    """The declaration of ``name``: its own module imported first (``capeval.<name>``), the others only where the
    name is not a module's.

    Raises:
        ValueError: an unknown name, naming the metrics there are.
    """
    if isinstance(name, str) and name in _registered:
        return _registered[name]
    if isinstance(name, str):
        own = f"capeval.{name}"
        for module in [own] if own in SPEC_MODULES else SPEC_MODULES:
            found = next((declared for declared in _declarations(module) if declared.name == name), None)
            if found is not None:
                return found
    raise ValueError(f"unknown metric {name!r}; choose from {', '.join(metric_names())}")


def register(declaration: MetricSpec) -> None:
    """Offer one more metric through every interface (until ``unregister``).

    Raises:
        ValueError: the name is one of capeval's own metrics.
    """
    if declaration.name in shipped_metrics():
        raise ValueError(f"{declaration.name!r} is one of capeval's metrics; give yours another name")
    _registered[declaration.name] = declaration


def unregister(name: str) -> None:
    """Withdraw a metric ``register`` added (nothing happens for other names)."""
    _registered.pop(name, None)


def row_image_metrics() -> tuple[str, ...]:
    """Metrics that score each item from its own image and caption (and references), whatever the other items:
    the ones a corpus can be cut into shards or parts for."""
    image_modules = tuple(m for m in SPEC_MODULES if m not in TEXT_ONLY_MODULES)
    candidates = {**_shipped(image_modules), **_registered}
    return tuple(
        name for name, declared in candidates.items() if declared.per_item and declared.needs("images")
    )


def metric_class(name: str) -> type:
    """The plain-API class of a metric name (``"clipscore"`` -> ``capeval.CLIPScore``).

    Raises:
        ValueError: unknown name.
    """
    return spec(name).scorer


def accepted_options(cls: type) -> set[str]:
    """Keyword arguments a metric class's constructor takes, following ``*args, **kwargs`` up the MRO."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    names.discard("self")
    return names


def call_inputs(scorer: Any) -> set[str]:
    """Keyword inputs a scorer's ``__call__`` takes (``images``, ``references``, ``videos``, ...)."""
    params = inspect.signature(scorer.__call__).parameters
    return {n for n in params if n != "predictions"}


def build_scorer(name: str, **options) -> Any:
    """The scorer of ``name`` built with ``options``; an option it does not declare is an error naming it."""
    declaration = spec(name)
    unknown = sorted(set(options) - set(declaration.option_names()))
    if unknown:
        raise TypeError(
            f"{name} does not take the option(s) {unknown}; it takes {sorted(declaration.option_names())}"
        )
    return declaration.scorer(**options)


def shipped_metrics() -> tuple[str, ...]:
    """capeval's own metrics (each with its evaluate module under ``metrics/<name>/``), not those registered."""
    return tuple(_shipped())


def __getattr__(name: str):
    # METRICS reads the declarations, which import the metric modules: only when asked for.
    if name == "METRICS":
        return shipped_metrics()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
