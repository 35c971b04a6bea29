"""Benchmark loaders on hand-written format fixtures (tests/fixtures/bench) and on generated .mat/.parquet files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capeval.bench import (
    load_abstract50s,
    load_clipscore_json,
    load_composite,
    load_flickr8k_cf,
    load_flickr8k_expert,
    load_foil,
    load_nebula,
    load_pascal50s,
    load_pascal50s_json,
    load_polaris,
    load_system_captions,
    load_system_human_scores,
    load_thumb,
    load_vatex_eval,
    read_references,
)
from capeval.bench.composite import parse_correctness_csv

FIX = Path(__file__).parent / "fixtures" / "bench"


# ---------------------------------------------------------------- helpers writing the binary layouts


def write_pascal_mats(folder: Path, pairs, consensus_votes=None, image_sents=None) -> Path:
    """pair_pascal.mat (and consensus_pascal.mat, pascal50S.mat) in the CIDEr layout, from Python lists.

    pairs: [(image, sentence 1, sentence 2, category 1-4, [11 votes +1/-1])].
    """
    from scipy.io import savemat

    n = len(pairs)
    new_input = np.zeros((1, n), dtype=[("name", "O"), ("sent1", "O"), ("sent2", "O")])
    result = np.zeros((1, n), dtype=[("result", "O")])
    for i, (img, a, b, _cat, votes) in enumerate(pairs):
        new_input[0, i] = (img, " " + a, " " + b)
        result[0, i] = (np.array([votes], dtype=np.int16),)
    category = np.array([[p[3] for p in pairs]], dtype=np.uint8)
    new_data = np.array([[6, 6]] * n, dtype=np.uint8)
    savemat(
        folder / "pair_pascal.mat",
        {"new_input": new_input, "category": category, "result": result, "new_data": new_data},
    )
    if consensus_votes is not None:
        trip = np.zeros((1, 48 * n), dtype=[("ref", "O"), ("s1", "O"), ("s2", "O"), ("winner", "O")])
        for i, (img, a, b, _c, _v) in enumerate(pairs):
            va, vb = consensus_votes[i]
            winners = [1] * va + [2] * vb
            for j in range(48):
                trip[0, 48 * i + j] = (
                    np.array([np.array([f"reference {j} of {img}"])], dtype=object),
                    a,
                    b,
                    np.array([[winners[j]]], dtype=float),
                )
        savemat(folder / "consensus_pascal.mat", {"triplets": trip})
    if image_sents is not None:
        refs = np.zeros((1, len(image_sents)), dtype=[("image", "O"), ("sent", "O")])
        for k, (img, sents) in enumerate(image_sents.items()):
            cell = np.empty((1, len(sents)), dtype=object)
            for j, s in enumerate(sents):
                cell[0, j] = np.array([s])
            refs[0, k] = (img, cell)
        savemat(folder / "pascal50S.mat", {"refs": refs})
    return folder


PAIRS = [
    ("2008_000001.jpg", "A dog on a sofa.", "A cat on a bed.", 1, [1] * 6 + [-1] * 5),
    ("2008_000001.jpg", "A dog on a sofa.", "Two men fishing.", 2, [1] * 11),
    ("2008_000002.jpg", "A red bus.", "a bus on the road", 3, [-1] * 7 + [1] * 4),
    ("2008_000002.jpg", "a bus is parked", "a bus on the road", 4, [1] * 5 + [-1] * 5),
]


# ---------------------------------------------------------------- Flickr8k and the CLIPScore layout


def test_flickr8k_expert_keeps_every_row_and_flags_candidates_among_their_references():
    ds = load_flickr8k_expert(FIX / "flickr8k", image_root="/imgs")
    assert len(ds) == 6
    assert ds["candidate_in_references"] == [False, True, False, False, False, False]
    row = ds[0]
    assert row["candidate"] == "Kids building a sandcastle by the sea ."
    assert row["human_scores"] == [1.0, 1.0, 2.0]
    assert len(row["references"]) == 5
    assert row["image"] == "/imgs/1000000001_a1b2c3d4e5.jpg"
    assert load_flickr8k_expert(FIX / "flickr8k")[0]["image"] is None


def test_flickr8k_cf_reads_the_yes_fraction_and_counts():
    ds = load_flickr8k_cf(FIX / "flickr8k")
    assert len(ds) == 6
    # Third fixture row: yes fraction written with the official file's 15 digits (2 yes of 3 judgments).
    assert ds[2]["human_scores"] == [0.666666666666667]  # the official file's 15 digits
    assert (ds[2]["n_yes"], ds[2]["n_no"]) == (2, 1)
    assert ds["candidate_in_references"] == [True, False, True, False, True, False]


def test_flickr8k_loaders_read_the_clipscore_authors_json_as_the_text_files_under_the_protocol():
    # flickr8k_clipscore/ holds what jmhessel/clipscore flickr8k_example/download.py writes from flickr8k/
    from capeval.bench.protocols import exclude_candidates_in_references, remove_judged_from_references

    text = exclude_candidates_in_references(load_flickr8k_expert(FIX / "flickr8k"))
    js = load_flickr8k_expert(FIX / "flickr8k_clipscore")
    assert js["candidate"] == text["candidate"] and js["human_scores"] == text["human_scores"]
    assert js["references"] == text["references"] and set(js["category"]) == {"expert"}
    text_cf = remove_judged_from_references(load_flickr8k_cf(FIX / "flickr8k"))
    js_cf = load_flickr8k_cf(FIX / "flickr8k_clipscore" / "crowdflower_flickr8k.json")
    cols = ("candidate", "human_scores", "references")
    assert sorted(zip(*(js_cf[c] for c in cols), strict=True)) == sorted(
        zip(*(text_cf[c] for c in cols), strict=True)
    )


def test_flickr8k_loader_names_the_missing_token_file(tmp_path):
    (tmp_path / "ExpertAnnotations.txt").write_text((FIX / "flickr8k" / "ExpertAnnotations.txt").read_text())
    with pytest.raises(FileNotFoundError, match="Flickr8k.token.txt"):
        load_flickr8k_expert(tmp_path)


def test_clipscore_layout_groups_repeated_judgments_and_skips_nan_ratings(caplog):
    ds = load_clipscore_json(FIX / "clipscore_layout.json")
    assert ds["candidate"] == ["A cat sleeps .", "A dog is running ."]
    assert ds["human_scores"] == [[1.0, 2.0], [4.0]]
    assert ds[0]["references"][1] == "A brown dog is running outside ."
    assert "NaN rating" in caplog.text


# ---------------------------------------------------------------- Composite


def test_composite_parser_reads_captions_and_ratings_after_the_image_url():
    rows, skipped = parse_correctness_csv(FIX / "composite" / "coco_correctness.csv")
    assert rows == [
        {
            "image": "COCO_val2014_000000000042.jpg",
            "captions": [
                "A pizza with cheese on a table.",
                "A pizza on a plate.",
                "A dog eating food.",
                "Food on a table.",
            ],
            "ratings": [5.0, 4.0, 1.0, 3.0],
        }
    ]
    assert skipped == []


def test_composite_loads_each_source_with_its_references_and_reports_summary_lines(caplog):
    ds = load_composite(FIX / "composite")
    assert len(ds) == 3 + 3 + 4
    assert set(ds["category"]) == {"flickr8k", "coco"}
    assert ds["human_candidate"].count(True) == 3
    coco = ds.filter(lambda r: r["source"] == "coco")
    assert len(coco[0]["references"]) == 5
    assert "line 5" in caplog.text


def test_composite_without_its_files_says_where_they_come_from(tmp_path):
    with pytest.raises(FileNotFoundError, match="8k_correctness.csv"):
        load_composite(tmp_path)


# ---------------------------------------------------------------- Pascal-50S / Abstract-50S


def test_pascal50s_mat_labels_from_48_consensus_votes_with_seeded_tie_breaks(tmp_path):
    write_pascal_mats(tmp_path, PAIRS, consensus_votes=[(30, 18), (48, 0), (10, 38), (24, 24)])
    ds = load_pascal50s(tmp_path)
    assert ds["category"] == ["HC", "HI", "HM", "MM"]
    assert ds["label"][:3] == [0, 0, 1]
    assert ds["tie"] == [False, False, False, True]
    assert ds[0]["votes"] == [30, 18]
    assert ds[0]["votes_11"] == [6, 5]
    assert len(ds[0]["references"]) == 48
    assert ds[0]["candidates"] == ["A dog on a sofa.", "A cat on a bed."]
    assert "consensus_pascal.mat" in ds[0]["label_source"]
    assert load_pascal50s(tmp_path)["label"] == ds["label"]  # the tie break is seeded


def test_pascal50s_mat_without_consensus_uses_11_votes_and_pascal50S_sentences(tmp_path):
    sents = {"2008_000001.jpg": ["A dog on a sofa.", "x one", "x two"], "2008_000002.jpg": ["y one", "y two"]}
    write_pascal_mats(tmp_path, PAIRS, image_sents=sents)
    ds = load_pascal50s(tmp_path)
    assert ds["label"][:3] == [0, 0, 1]
    assert ds[0]["references"] == ["x one", "x two"]  # the candidate itself is not a reference
    assert "11 votes" in ds[0]["label_source"]


def test_pascal50s_sentences_from_the_python_cider_json_equal_those_from_the_mat(tmp_path):
    # vrama91/cider data/pascal50S.json: [{"image_id", "caption"}], the image's sentences in order
    sents = {"2008_000001.jpg": ["A dog on a sofa.", "x one", "x two"], "2008_000002.jpg": ["y one", "y two"]}
    write_pascal_mats(tmp_path, PAIRS, image_sents=sents)
    from_mat = load_pascal50s(tmp_path)["references"]
    (tmp_path / "pascal50S.mat").unlink()
    rows = [{"image_id": img, "caption": c} for img, caps in sents.items() for c in caps]
    (tmp_path / "pascal50S.json").write_text(json.dumps(rows))
    from_json = load_pascal50s(tmp_path)["references"]
    assert from_json == from_mat and from_json[0] == ["x one", "x two"]


def test_pascal50s_json_layout_and_its_labels(tmp_path):
    data = {
        "HC": [
            {
                "image": "VOC2012/JPEGImages/2008_000001.jpg",
                "captions": ["a", "b"],
                "label": 1,
                "references": ["r1", "r2"],
            }
        ],
        "HI": [],
        "HM": [],
        "MM": [],
    }
    (tmp_path / "pascal_50s_consensus_labels.json").write_text(json.dumps(data))
    ds = load_pascal50s_json(tmp_path, image_root="/voc")
    assert ds[0]["label"] == 1 and ds[0]["image"] == "/voc/2008_000001.jpg"
    write_pascal_mats(tmp_path, [("2008_000001.jpg", "a", "b", 1, [1] * 11)])
    assert load_pascal50s(tmp_path)[0]["label"] == 1  # the JSON consensus label wins over the 11 votes


def test_pascal_extras_are_empty_without_the_optional_files_and_read_when_present(tmp_path):
    from capeval.bench.pascal_files import read_extras

    empty = read_extras(tmp_path, 4)
    assert empty.consensus_refs is None and empty.consensus_votes is None
    assert empty.image_refs == {} and empty.json_index == {} and empty.labels_name is None
    sents = {"2008_000001.jpg": ["x one"], "2008_000002.jpg": ["y one"]}
    write_pascal_mats(
        tmp_path, PAIRS, consensus_votes=[(30, 18), (48, 0), (10, 38), (24, 24)], image_sents=sents
    )
    (tmp_path / "pascal_50s_consensus_labels.json").write_text(json.dumps({"HC": []}))
    extras = read_extras(tmp_path, 4)
    assert extras.consensus_votes == [[30, 18], [48, 0], [10, 38], [24, 24]]
    assert (
        extras.consensus_refs[1][0] == "reference 0 of 2008_000001.jpg"
        and len(extras.consensus_refs[1]) == 48
    )
    assert extras.image_refs == sents and extras.labels_name == "pascal_50s_consensus_labels.json"


def test_pascal_label_prefers_consensus_then_the_json_label_then_the_11_votes():
    from capeval.bench.pascal import _pascal_label
    from capeval.bench.pascal_files import PascalExtras

    rng = np.random.default_rng(0)
    hit = ("HC", 1, ["r"])
    consensus = PascalExtras(consensus_votes=[[10, 38]], labels_name="labels.json")
    assert _pascal_label(0, [11, 0], hit, consensus, rng) == (
        [10, 38],
        1,
        False,
        "consensus_pascal.mat (48 judgments)",
    )
    json_only = PascalExtras(labels_name="labels.json")
    assert _pascal_label(0, [11, 0], hit, json_only, rng) == (
        [],
        1,
        False,
        "labels.json (48-judgment consensus)",
    )
    assert _pascal_label(0, [7, 4], None, json_only, rng) == ([7, 4], 0, False, "pair_pascal.mat (11 votes)")


def test_pascal_label_breaks_a_tie_with_the_generator_it_is_given():
    from capeval.bench.pascal import _pascal_label
    from capeval.bench.pascal_files import PascalExtras

    labels = [_pascal_label(0, [5, 5], None, PascalExtras(), np.random.default_rng(s))[1:3] for s in range(8)]
    assert {tie for _, tie in labels} == {True} and {label for label, _ in labels} == {0, 1}
    assert labels == [
        _pascal_label(0, [5, 5], None, PascalExtras(), np.random.default_rng(s))[1:3] for s in range(8)
    ]


def test_pascal_references_by_priority_never_include_the_two_candidates():
    from capeval.bench.pascal import _pascal_references
    from capeval.bench.pascal_files import PascalExtras

    hit = ("HC", 0, ["json ref"])
    images = {"img.jpg": ["cand a", "s1", "cand b", "s2"]}
    both = PascalExtras(consensus_refs=[["c1", "c2"]], image_refs=images)
    assert _pascal_references(0, "img.jpg", ("cand a", "cand b"), hit, both) == ["c1", "c2"]
    sentences = PascalExtras(image_refs=images)
    assert _pascal_references(0, "img.jpg", ("cand a", "cand b"), hit, sentences) == ["s1", "s2"]
    assert _pascal_references(0, "other.jpg", ("a", "b"), hit, sentences) == ["json ref"]
    assert _pascal_references(0, "other.jpg", ("a", "b"), None, sentences) == []


def test_json_entries_of_a_repeated_pair_are_taken_in_file_order_once_each():
    from collections import defaultdict

    from capeval.bench.pascal import _take_json_entry

    key = ("img.jpg", "a", "b")
    index = {key: [("HC", 0, []), ("HI", 1, [])]}
    used: dict = defaultdict(int)
    taken = [_take_json_entry(index, used, key) for _ in range(3)]
    assert taken == [("HC", 0, []), ("HI", 1, []), None]
    assert _take_json_entry(index, used, ("img.jpg", "a", "c")) is None and used[key] == 2


def test_abstract50s_pairs_candidates_with_48S_references_and_optional_votes():
    folder = FIX / "abstract50s"
    ds = load_abstract50s(folder, votes=folder / "abstract50s_votes.json")
    assert ds["label"] == [0, 1]
    assert ds[1]["candidates"] == ["Jenny sits by a tree.", "Jenny runs away from a bear."]
    assert len(ds[0]["references"]) == 3
    assert load_abstract50s(folder)["label"] == [-1, -1]


# ---------------------------------------------------------------- FOIL, VATEX-EVAL


def test_foil_pairs_each_foil_with_its_correct_caption_and_four_references():
    ds = load_foil(FIX / "foil")
    assert len(ds) == 3
    assert ds[0]["candidates"] == ["A man riding a horse on a beach.", "A man riding a cow on a beach."]
    assert ds["label"] == [0, 0, 0]
    assert all(len(r) == 4 for r in ds["references"])
    assert "A man riding a horse on a beach." not in ds[0]["references"]
    assert ds[2]["foil_word"] == "dog"


def test_vatex_eval_one_row_per_candidate_with_9_references_and_3_ratings():
    ds = load_vatex_eval(FIX / "vatex_eval")
    assert len(ds) == 18
    assert set(ds.column_names) >= {"video_id", "candidate", "references", "human_scores"}
    assert all(len(r) == 9 for r in ds["references"])
    assert all(len(h) == 3 for h in ds["human_scores"])
    assert ds[0]["item_id"] == "vid00_000001_000011#0"


def test_vatex_eval_authors_pickles_give_the_same_rows_as_the_json_redistribution():
    # ShiYaya/emscore VATEX-EVAL-demo.py: four pickled arrays; human_scores annotator-major (reshape(3, -1).T)
    release = load_vatex_eval(FIX / "vatex_eval_release")
    assert release.to_dict() == load_vatex_eval(FIX / "vatex_eval").to_dict()
    # video vid00_000001_000011, candidate 5: JSON scores row [5.0, 1.0, 1.0]; in the flat pickle these are
    # entries 5, 18 + 5 and 36 + 5 (18 candidates per annotator)
    assert release[5]["human_scores"] == [5.0, 1.0, 1.0]
    assert len(load_vatex_eval(FIX / "vatex_eval_release" / "gts_list.pkl")) == 18


def test_vatex_eval_pickles_of_object_arrays_read_and_code_is_refused(tmp_path):
    import pickle

    n = 2
    arrays = {
        "candidates_list": np.array(["a man runs .", "a dog sits ."], dtype=object),
        "gts_list": np.array([["r1", "r2"], ["r1", "r2"]], dtype=object),
        "human_scores": np.array([1, 2, 3, 4, 5, 1]),
        "video_ids": np.array(["v", "v"], dtype=object),
    }
    for name, arr in arrays.items():
        (tmp_path / f"{name}.pkl").write_bytes(pickle.dumps(arr, protocol=2))
    ds = load_vatex_eval(tmp_path)
    assert ds["item_id"] == ["v#0", "v#1"]
    assert ds["human_scores"] == [[1.0, 3.0, 5.0], [2.0, 4.0, 1.0]]  # column k of reshape(3, n)
    assert ds["references"] == [["r1", "r2"]] * n

    class Runs:
        def __reduce__(self):
            return (print, ("ran",))

    (tmp_path / "video_ids.pkl").write_bytes(pickle.dumps(Runs()))
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        load_vatex_eval(tmp_path)
    (tmp_path / "video_ids.pkl").unlink()
    with pytest.raises(FileNotFoundError, match="video_ids.pkl missing"):
        load_vatex_eval(tmp_path)


def test_vatex_eval_refuses_a_candidate_without_three_ratings(tmp_path):
    data = {"v": {"vid": "v", "cands": ["a"], "scores": "[[1.0, 2.0]]", "refs": [["r"] * 9]}}
    (tmp_path / "vid_cans_score_dict.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="2 ratings; expected 3"):
        load_vatex_eval(tmp_path)


# ---------------------------------------------------------------- THumB, systems, Polaris, Nebula


def test_thumb_official_layout_matches_segment_keyed_references_from_the_json_lines_dot_json_file():
    # jungokasai/THumB mscoco/: mscoco_THumB-1.0.jsonl + mscoco_references.json (JSON lines, keyed by seg_id)
    ds = load_thumb(FIX / "thumb")
    assert len(ds) == 15
    assert set(ds["system"]) == {"Up-Down", "Unified-VLP", "VinVL-base", "VinVL-large", "Human"}
    first = ds.filter(lambda r: r["seg_id"] == "974")
    assert first["references"][0][0] == "A sleeping dog stretched out on a couch."
    assert all(len(r) == 4 for r in ds["references"])
    # human_score = (P + R) / 2 + Fl + Inc + Con (THumB mscoco/README.md); the Human row of 974: (5+4)/2 - 1
    human = first.filter(lambda r: r["system"] == "Human")
    assert human["human_scores"] == [[3.5]] and human["precision"] == [5.0] and human["recall"] == [4.0]
    explicit = load_thumb(
        FIX / "thumb" / "mscoco_THumB-1.0.jsonl", references=FIX / "thumb" / "mscoco_references.json"
    )
    assert explicit["references"] == ds["references"]


def test_thumb_with_full_coco_references_drops_the_human_caption_once(tmp_path):
    thumb = (FIX / "thumb" / "mscoco_THumB-1.0.jsonl").read_text().splitlines()
    (tmp_path / "mscoco_THumB-1.0.jsonl").write_text("\n".join(thumb[:5]) + "\n")
    human = json.loads(thumb[4])["hyp"]
    coco = tmp_path / "captions_val2014.json"
    caps = ["A dog on a sofa.", human, "A dog asleep.", "A red couch.", human]
    coco.write_text(
        json.dumps(
            {
                "images": [{"id": 974, "file_name": "COCO_val2014_000000000974.jpg"}],
                "annotations": [{"image_id": 974, "id": i, "caption": c} for i, c in enumerate(caps)],
            }
        )
    )
    ds = load_thumb(tmp_path, references=coco)
    by_system = dict(zip(ds["system"], ds["references"], strict=True))
    assert by_system["Human"] == ["A dog on a sofa.", "A dog asleep.", "A red couch.", human]
    assert by_system["Up-Down"] == caps


def test_thumb_rows_without_references_are_an_error_naming_the_line(tmp_path):
    (tmp_path / "mscoco_THumB-1.0.jsonl").write_text((FIX / "thumb" / "mscoco_THumB-1.0.jsonl").read_text())
    refs = (FIX / "thumb" / "mscoco_references.json").read_text().splitlines()
    (tmp_path / "mscoco_references.json").write_text("\n".join(refs[:2]) + "\n")
    with pytest.raises(ValueError, match=r"5 of 15 THumB rows have no references .* line 11 \(seg_id 2690"):
        load_thumb(tmp_path)


def test_system_captions_and_human_scores_for_coco_style_system_evaluation(tmp_path):
    for sys_name, cap in (("sysA", "A pizza."), ("sysB", "A cheese pizza on a table.")):
        (tmp_path / f"{sys_name}.json").write_text(json.dumps([{"image_id": 42, "caption": cap}]))
    (tmp_path / "human.csv").write_text("system,M1,M2\nsysA,0.2,0.3\nsysB,0.4,0.5\n")
    ds = load_system_captions(tmp_path, FIX / "composite" / "captions_val2014.json")
    assert ds["system"] == ["sysA", "sysB"]
    assert len(ds[0]["references"]) == 5
    assert load_system_human_scores(tmp_path / "human.csv")["sysB"] == {"M1": 0.4, "M2": 0.5}


def test_polaris_csv_layout_parses_reference_lists_as_literals():
    ds = load_polaris(FIX / "polaris")
    assert len(ds) == 4
    assert ds[2]["references"][1] == "Kids' sandcastle on the beach."
    assert ds["human_scores"][0] == [0.875]  # the first row's "score" column of polaris_test.csv
    assert ds[0]["image"].endswith("images/img_001.jpg") and ds[2]["image"].endswith("images/img_002.jpg")


def _write_hub_parquet(folder: Path, split: str, columns: dict) -> None:
    import datasets
    from PIL import Image

    img = Image.new("RGB", (4, 4), (255, 0, 0))
    n = len(next(iter(columns.values())))
    image_col = "img" if "cand" in columns else "image"  # Polaris calls it img, Nebula image
    ds = datasets.Dataset.from_dict({**columns, image_col: [img] * n}).cast_column(
        image_col, datasets.Image()
    )
    (folder / "data").mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))


def test_polaris_and_nebula_hub_parquet_layouts_keep_embedded_images(tmp_path):
    _write_hub_parquet(
        tmp_path / "polaris",
        "test",
        {"refs": [["a ref", "b ref"], ["c ref"]], "cand": ["a cand", "b cand"], "human_score": [0.5, 0.25]},
    )
    pol = load_polaris(tmp_path / "polaris")
    assert pol["candidate"] == ["a cand", "b cand"]
    assert pol["human_scores"] == [[0.5], [0.25]]
    assert pol[0]["image"].size == (4, 4)
    _write_hub_parquet(
        tmp_path / "nebula",
        "valid",
        {
            "file_name": ["x.jpg", "y.jpg"],
            "refs": [["r"], ["s"]],
            "mt": ["m1", "m2"],
            "human_score": [0.1, 0.9],
        },
    )
    neb = load_nebula(tmp_path / "nebula", split="valid")
    assert neb["image_id"] == ["x.jpg", "y.jpg"]
    assert neb["item_id"] == ["nebula/valid/0", "nebula/valid/1"]


def test_hub_loaders_refuse_to_download_when_offline():
    with pytest.raises(FileNotFoundError, match="Hub is off"):
        load_polaris(None)


# ---------------------------------------------------------------- reference files


def test_reference_layouts_token_coco_karpathy_and_jsonl(tmp_path):
    token = read_references(FIX / "flickr8k" / "Flickr8k.token.txt")
    assert len(token["1000000001_a1b2c3d4e5"]) == 5
    coco = read_references(FIX / "composite" / "captions_val2014.json")
    assert list(coco) == ["COCO_val2014_000000000042"]
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(
        json.dumps(
            {"images": [{"filename": "COCO_val2014_000000000042.jpg", "sentences": [{"raw": "A pizza."}]}]}
        )
    )
    assert read_references(karpathy) == {"COCO_val2014_000000000042": ["A pizza."]}
    jsonl = tmp_path / "refs.json"  # JSON lines recognised by content, whatever the extension
    jsonl.write_text('{"image": "a/1.jpg", "refs": ["x", "y"]}\n{"image": "2.jpg", "references": ["z"]}\n')
    assert read_references(jsonl) == {"1": ["x", "y"], "2": ["z"]}


def test_a_coco_annotation_without_a_caption_is_refused_by_its_index_not_a_bare_key_error(tmp_path):
    coco = tmp_path / "captions_val2014.json"
    coco.write_text(
        json.dumps({"images": [], "annotations": [{"image_id": 42, "caption": "a"}, {"image_id": 7}]})
    )
    with pytest.raises(
        ValueError, match=r"captions_val2014.json: annotation 1 has no 'image_id' and 'caption'"
    ):
        read_references(coco)


def test_an_image_given_twice_in_a_karpathy_file_is_refused_not_overwritten(tmp_path):
    karpathy = tmp_path / "dataset_coco.json"
    image = {"filename": "COCO_val2014_000000000042.jpg", "sentences": [{"raw": "A pizza."}]}
    karpathy.write_text(json.dumps({"images": [image, image]}))
    with pytest.raises(ValueError, match=r"image 'COCO_val2014_000000000042.jpg' appears twice"):
        read_references(karpathy)


def test_reference_reader_points_thumb_segment_files_to_load_thumb():
    with pytest.raises(ValueError, match=r"got \['refs', 'seg_id', 'set_id'\].*load_thumb"):
        read_references(FIX / "thumb" / "mscoco_references.json")


# --- JSON files: duplicate keys, nesting, encodings ---


def test_benchmark_reference_files_refuse_a_repeated_key_in_a_document_and_in_a_json_lines_row(tmp_path):
    coco = tmp_path / "captions_val2014.json"
    coco.write_text('{"images": [],\n "annotations": [{"image_id": 42, "caption": "a", "caption": "b"}]}')
    with pytest.raises(ValueError, match=r'captions_val2014.json: key "caption" appears twice in one object'):
        read_references(coco)
    lines = tmp_path / "refs.jsonl"
    lines.write_text('{"image": "1.jpg", "refs": ["x"]}\n{"image": "2.jpg", "refs": ["y"], "refs": ["z"]}\n')
    with pytest.raises(ValueError, match=rf'{lines}:2: key "refs" appears twice in one object'):
        read_references(lines)


def test_a_utf16_benchmark_references_file_is_named_as_utf16(tmp_path):
    path = tmp_path / "dataset_coco.json"
    path.write_bytes(
        json.dumps({"images": [{"filename": "1.jpg", "sentences": [{"raw": "A pizza."}]}]}).encode("utf-16")
    )
    with pytest.raises(ValueError, match=r"dataset_coco.json is UTF-16 \(little-endian\) text"):
        read_references(path)
