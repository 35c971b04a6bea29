"""published.json is the one source of published figures: cards, docs and reports agree with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from capeval.bench.benchmarks import BENCHMARKS
from capeval.bench.published import (
    CARD_BLOCK,
    card_table,
    format_value,
    published_elsewhere,
    published_value,
    published_values,
    render_cards,
    sources,
)

REPO = Path(__file__).resolve().parents[1]
CARDS = sorted((REPO / "metrics").glob("*/README.md"))
PAPERS = REPO.parent / "shared" / "papers"
PAPER_FILES = {
    "hessel2021": "hessel2021_clipscore.txt",
    "sarto2023": "sarto2023_pacscore.txt",
    "kilickaya2017": "kilickaya2017_reevaluating_metrics_wmd.txt",
    "sharif2020": "sharif2020_wembsim.txt",
}
# Tables as the papers number them: a wrong table number in a source is a defect.
TABLES = {
    "hessel2021_t1": "Flickr8K-Expert",
    "hessel2021_t2": "Flickr8K-CF",
    "hessel2021_t3": "Composite",
    "hessel2021_t4": "Pascal50S",
    "hessel2021_t5": "FOIL",
    "sarto2023_t1": "Flickr8k-Expert and Flickr8k-CF",
    "sarto2023_t2": "Composite",
    "sarto2023_t3": "VATEX-EVAL",
    "sarto2023_t4": "Pascal-50S",
    "sarto2023_t5": "Abstract-50S",
    "sarto2023_t6": "ActivityNet-FOIL",
}


def _card_rows(text: str) -> list[list[str]]:
    rows = []
    for match in CARD_BLOCK.finditer(text):
        for line in match.group(2).splitlines()[2:]:
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_every_card_has_a_published_table_generated_from_published_json():
    assert len(CARDS) == 6
    for card in CARDS:
        text = card.read_text(encoding="utf-8")
        assert CARD_BLOCK.search(text), f"{card.parent.name}: no <!-- published: ... --> table"
        assert render_cards(text) == text, (
            f"{card.parent.name}/README.md disagrees with published.json: run "
            "capeval.bench.published.update_card on it"
        )


def test_each_card_row_is_a_published_json_record_with_its_value_and_source():
    records = {
        (p.benchmark, p.row, p.printed_column, p.setting_label() or "default"): p for p in published_values()
    }
    for card in CARDS:
        rows = _card_rows(card.read_text(encoding="utf-8"))
        assert rows, card
        for bench, row, column, setting, value, source in rows:
            p = records.get((bench, row, column, setting))
            assert p is not None, (
                f"{card.parent.name}: no published.json record for {bench} / {row} / {column}"
            )
            assert float(value.split(" ")[0]) == p.value, f"{card.parent.name}: {bench} {row} {column}"
            assert source == f"`{p.source}`"


def test_a_changed_value_makes_the_regenerated_card_differ(monkeypatch):
    # The mutation the card test must catch: 80.7 (Hessel et al. Table 4, CLIP-S Mean) edited to 80.9 in a card.
    card = (REPO / "metrics" / "clipscore" / "README.md").read_text(encoding="utf-8")
    row = "| pascal50s | CLIP-S (no refs) | Mean | default | 80.7 | `hessel2021_t4` |"
    assert row in card
    assert render_cards(card.replace(row, row.replace("80.7", "80.9"))) == card


def test_published_json_cites_tables_by_their_printed_numbers():
    src = sources()
    for key, topic in TABLES.items():
        assert topic in src[key], (key, src[key])
    # Table numbers as printed: Flickr8k-CF is Hessel's Table 2, Composite 3, Pascal-50S 4; Sarto's FOIL is 6.
    assert published_value("flickr8k_cf", "clipscore", "kendall_b").source == "hessel2021_t2"
    assert published_value("composite", "refclipscore", "kendall_c").source == "hessel2021_t3"
    assert published_value("pascal50s", "clipscore", "mean").source == "hessel2021_t4"
    assert published_value("composite", "pacscore", "kendall_c").source == "sarto2023_t2"
    assert published_value("pascal50s", "refpacscore", "mean").source == "sarto2023_t4"
    assert published_value("foil", "refpacscore", "acc_4ref").source == "sarto2023_t6"


def test_values_of_the_default_setting_are_unique_and_fit_the_report_columns():
    seen = set()
    for p in published_values():
        assert 0 < p.value <= 100, p
        key = (p.benchmark, p.column, p.metric, p.setting_label())
        assert key not in seen, f"two published values for {key}"
        seen.add(key)
        if not p.setting and p.benchmark in BENCHMARKS:
            assert p.column in {c for c, _ in BENCHMARKS[p.benchmark].columns}, p


def test_a_fraction_printed_in_the_paper_is_kept_beside_its_value_times_100():
    for p in published_values():
        if p.printed_value is not None:
            assert float(p.printed_value) * 100 == pytest.approx(p.value), p
    wmd = [p for p in published_values("pascal50s", "wmd") if p.source == "kilickaya2017_t4"]
    assert {p.column: p.printed for p in wmd} == {
        "HC": "0.71",
        "HI": "0.99",
        "HM": "0.93",
        "MM": "0.74",
        "mean": "0.84",
    }


def test_a_paper_in_another_setting_is_compared_only_with_a_run_in_that_setting():
    glove = "wmd|vectors=glove-6b-50d@kumo1.0.0-9abcdbc8:400000x50|normalize_vectors=False|capeval=0.2.0"
    w2v = "wmd|vectors=word2vec-google-news-300@abc|normalize_vectors=False|capeval=0.2.0"
    assert published_value("pascal50s", "wmd", "mean", glove) is None
    assert [p.value for p in published_elsewhere("pascal50s", "wmd", "mean", glove)] == [84.0]
    assert published_value("pascal50s", "wmd", "mean", w2v).value == 84.0
    assert published_elsewhere("pascal50s", "wmd", "mean", w2v) == []


def test_card_table_rows_follow_published_json_order_and_format():
    table = card_table(["emscore"]).splitlines()
    assert table[2] == "| vatex_eval | EMScore [49] | No Ref Kendall τ_b | default | 23.2 | `sarto2023_t3` |"
    assert format_value(53.0) == "53.0" and format_value(53.919) == "53.919"


BENCHMARKS_PAGE = REPO / "docs" / "guides" / "benchmarks.md"


def test_the_benchmarks_page_quotes_published_figures_as_published_json_holds_them():
    text = BENCHMARKS_PAGE.read_text(encoding="utf-8")
    found = re.findall(r"(CIDEr|METEOR) [\d.]+ \(published ([\d.]+)\)", text)
    assert {m for m, _ in found} == {"CIDEr", "METEOR"}
    keys = {"CIDEr": "cider", "METEOR": "meteor"}
    for name, value in found:
        assert float(value) == round(published_value("flickr8k_expert", keys[name], "kendall_c").value, 1), (
            name
        )


def test_the_benchmarks_page_quotes_our_runs_as_the_cards_hold_them():
    # The page quotes our own Pascal-50S means (5 random draws); the WMD and WEmbSim cards hold the same runs.
    text = BENCHMARKS_PAGE.read_text(encoding="utf-8")
    match = re.search(
        r"Pascal-50S mean accuracy over 5 random draws of 5 references: WMD ([\d.]+), WEmbSim ([\d.]+)", text
    )
    assert match
    for metric, value in zip(("wmd", "wembsim"), match.groups(), strict=True):
        card = (REPO / "metrics" / metric / "README.md").read_text(encoding="utf-8")
        row = next(
            line for line in card.splitlines() if line.startswith("| Pascal-50S, mean of 5 random draws")
        )
        assert row.rstrip(" |").split(" / ")[-1] == value, metric
    expert = re.search(r"Flickr8k-Expert tau-c: .*?WMD ([\d.]+), WEmbSim ([\d.]+)", text)
    for metric, value in zip(("wmd", "wembsim"), expert.groups(), strict=True):
        card = (REPO / "metrics" / metric / "README.md").read_text(encoding="utf-8")
        row = next(line for line in card.splitlines() if line.startswith("| Flickr8k-Expert (5,664 pairs"))
        assert row.split("|")[-2].strip().split(" / ")[0] == value, metric


def test_every_paper_figure_is_printed_in_its_table():
    if not PAPERS.is_dir():
        pytest.skip("../shared/papers is not present on this machine")
    data = json.loads((REPO / "src" / "capeval" / "bench" / "published.json").read_text(encoding="utf-8"))
    for rec in data["values"]:
        paper = rec["source"].split("_")[0]
        if not re.fullmatch(r"[a-z]+\d{4}_t\d", rec["source"]):
            continue  # code output or a README, not the paper
        text = (PAPERS / PAPER_FILES[paper]).read_text(encoding="utf-8")
        printed = rec.get("printed_value") or f"{rec['value']:.1f}"
        lines = [line for line in text.splitlines() if printed in line]
        assert lines, f"{printed} ({rec['source']}) not in {PAPER_FILES[paper]}"
        if paper != "hessel2021":  # row-per-line tables: the row's own line carries the value
            row = _letters(rec["row"].split(" [")[0])
            assert any(row in _letters(line) for line in lines), (rec, lines)


def _letters(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())
