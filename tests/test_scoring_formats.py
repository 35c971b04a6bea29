"""The caption files ``capeval score`` reads: COCO results lists, COCO annotations and Karpathy split files for
references, image folders named by id or by COCO's patterns; ids matched across ints and strings, nothing
dropped."""

from __future__ import annotations

import json

import pytest
from coco_files import (
    CAPTIONS,
    COCO_IDS,
    REFERENCES,
    write_coco_annotations,
    write_coco_results,
    write_images,
    write_karpathy,
)

from capeval.scoring.formats import (
    InputFileError,
    canonical_id,
    read_caption_files,
    read_references,
    system_names,
)


@pytest.fixture()
def coco(tmp_path):
    """The COCO files of one system: results list, captions_val2014.json, COCO_val2014_%012d.jpg images."""
    write_images(tmp_path / "val2014", [f"COCO_val2014_{i:012d}.jpg" for i in COCO_IDS])
    write_coco_results(tmp_path / "results.json", CAPTIONS)
    write_coco_annotations(tmp_path / "captions_val2014.json", REFERENCES)
    return tmp_path


def test_a_coco_results_list_pairs_with_coco_annotations_and_coco_image_names(coco):
    files = read_caption_files([coco / "results.json"], coco / "val2014", coco / "captions_val2014.json")
    assert files.ids == COCO_IDS  # the results file's ints, in its order
    assert files.systems == {"results": [CAPTIONS[i] for i in COCO_IDS]}
    assert files.images == [str(coco / "val2014" / f"COCO_val2014_{i:012d}.jpg") for i in COCO_IDS]
    # Every annotation of an image, in file order, although the file interleaves the images.
    assert files.references == [REFERENCES[i] for i in COCO_IDS]
    assert files.unused_images == 0


def test_coco_2017_image_names_and_id_named_files_are_found(tmp_path):
    write_images(tmp_path / "images", [f"{391895:012d}.jpg", "42.png", f"{522418:012d}.png"])
    write_coco_results(tmp_path / "results.json", CAPTIONS)
    files = read_caption_files([tmp_path / "results.json"], tmp_path / "images")
    assert [p.rsplit("/", 1)[1] for p in files.images] == ["000000391895.jpg", "42.png", "000000522418.png"]


def test_karpathy_split_file_gives_the_references_of_coco_annotations(coco):
    write_karpathy(coco / "dataset_coco.json", REFERENCES)
    assert read_references(coco / "dataset_coco.json") == read_references(coco / "captions_val2014.json")
    files = read_caption_files([coco / "results.json"], coco / "val2014", coco / "dataset_coco.json")
    assert files.references == [REFERENCES[i] for i in COCO_IDS]


def test_karpathy_flickr_files_are_keyed_by_file_name(tmp_path):
    write_karpathy(tmp_path / "dataset_flickr8k.json", {1000268201: ["a child in pink"]}, coco=False)
    assert read_references(tmp_path / "dataset_flickr8k.json") == {"1000268201": ["a child in pink"]}


def test_authors_layout_still_reads_and_keeps_its_string_ids(tmp_path):
    write_images(tmp_path / "images", ["im0.png", "im1.png", "extra.png"])
    (tmp_path / "cands.json").write_text(json.dumps({"im1": "b", "im0": "a"}))
    (tmp_path / "refs.json").write_text(json.dumps({"im0": ["ra"], "im1": ["rb", "rb2"]}))
    files = read_caption_files([tmp_path / "cands.json"], tmp_path / "images", tmp_path / "refs.json")
    assert files.ids == ["im1", "im0"] and files.systems == {"cands": ["b", "a"]}
    assert files.references == [["rb", "rb2"], ["ra"]]
    assert files.unused_images == 1  # extra.png: reported by the CLI, not scored


def test_string_ids_of_the_authors_layout_match_coco_int_ids_and_file_names(coco):
    # {"42": ...} (JSON object keys are strings) and the int 42 of captions_val2014.json name one image.
    (coco / "cands.json").write_text(json.dumps({str(i): CAPTIONS[i] for i in COCO_IDS}))
    files = read_caption_files([coco / "cands.json"], coco / "val2014", coco / "captions_val2014.json")
    assert files.ids == [str(i) for i in COCO_IDS]
    assert files.references == [REFERENCES[i] for i in COCO_IDS]
    assert [canonical_id(x) for x in (42, "42", "000000000042", "COCO_train2014_000000000042")] == ["42"] * 4
    assert canonical_id("shapes07") == "shapes07"


def test_several_captions_for_one_image_are_refused_naming_it(coco):
    rows = [{"image_id": i, "caption": CAPTIONS[i]} for i in COCO_IDS]
    rows.append({"image_id": 42, "caption": "a second caption"})
    (coco / "results.json").write_text(json.dumps(rows))
    with pytest.raises(
        InputFileError, match=r"1 image_id\(s\) have more than one caption: \['42 \(entries \[1, 3\]\)"
    ):
        read_caption_files([coco / "results.json"], coco / "val2014")


def test_an_int_and_its_string_in_one_file_are_one_image_given_twice(tmp_path):
    (tmp_path / "results.json").write_text(
        json.dumps([{"image_id": 7, "caption": "a"}, {"image_id": "7", "caption": "b"}])
    )
    with pytest.raises(InputFileError, match=r"more than one caption: \['7 \(entries \[0, 1\]\)'\]"):
        read_caption_files([tmp_path / "results.json"])


def test_an_image_without_a_file_or_references_is_named(coco):
    (coco / "val2014" / f"COCO_val2014_{42:012d}.jpg").unlink()
    with pytest.raises(
        InputFileError, match=r"1 candidate id\(s\) have no image in the folder, e\.g\. \[42\]"
    ):
        read_caption_files([coco / "results.json"], coco / "val2014")
    write_coco_annotations(coco / "captions_val2014.json", {391895: ["x"]})
    with pytest.raises(
        InputFileError, match=r"2 candidate id\(s\) have no references, e\.g\. \[42, 522418\]"
    ):
        read_caption_files([coco / "results.json"], None, coco / "captions_val2014.json")


def test_systems_must_caption_the_same_images(coco):
    write_coco_results(coco / "other.json", {i: CAPTIONS[i] for i in COCO_IDS[:2]} | {7: "an extra image"})
    with pytest.raises(
        InputFileError, match=r"other lacks 1 image\(s\) of results \[522418\] and has 1 it lacks \[7\]"
    ):
        read_caption_files([coco / "results.json", coco / "other.json"], coco / "val2014")


def test_two_files_of_one_id_are_refused(tmp_path):
    write_images(tmp_path / "images", [f"COCO_val2014_{7:012d}.jpg", f"{7:012d}.jpg"])
    with pytest.raises(InputFileError, match=r"two images share the id '7'"):
        read_caption_files([write_coco_results(tmp_path / "r.json", {7: "a"})], tmp_path / "images")


def test_an_unknown_layout_and_a_float_id_are_named(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps([{"image": 1, "text": "a"}]))
    with pytest.raises(InputFileError, match=r"entry 0 is .*a COCO results file is a list of"):
        read_caption_files([tmp_path / "r.json"])
    (tmp_path / "r.json").write_text(json.dumps([{"image_id": 1.0, "caption": "a"}]))
    with pytest.raises(InputFileError, match=r"entry 0: image id 1\.0 is float, expected an int or a string"):
        read_caption_files([tmp_path / "r.json"])


def test_system_names_are_file_stems_unless_two_stems_are_the_same():
    assert system_names(["runs/blip.json", "runs/git.json"]) == ["blip", "git"]
    assert system_names(["a/res.json", "b/res.json"]) == ["a/res.json", "b/res.json"]
    with pytest.raises(InputFileError, match="given twice"):
        system_names(["a.json", "a.json"])


# --- JSON files: duplicate keys, nesting, encodings ---


def test_an_image_id_written_twice_in_a_candidates_object_is_refused_naming_it_and_its_lines(tmp_path):
    path = tmp_path / "cands.json"
    path.write_text('{\n  "im0": "a dog",\n  "im1": "a cat",\n  "im2": "a cow",\n\n\n  "im1": "a hen"\n}\n')
    with pytest.raises(
        InputFileError, match=r'cands.json: key "im1" appears twice in one object \(lines 3 and 7\)'
    ):
        read_caption_files([path])


def _with_a_repeated_key(path, old: str, new: str):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("layout", "read", "key"),
    [
        ("results", lambda p: read_caption_files([p]), "caption"),
        ("annotations", read_references, "image_id"),
        ("karpathy", read_references, "raw"),
        ("authors", read_references, "42"),
    ],
)
def test_a_key_written_twice_is_refused_in_every_layout(tmp_path, layout, read, key):
    path = tmp_path / f"{layout}.json"
    if layout == "results":
        _with_a_repeated_key(
            write_coco_results(path, CAPTIONS), '"caption": "a bowl', '"caption": "x", "caption": "a bowl'
        )
    elif layout == "annotations":
        _with_a_repeated_key(
            write_coco_annotations(path, REFERENCES), '"image_id": 42', '"image_id": 7, "image_id": 42'
        )
    elif layout == "karpathy":
        _with_a_repeated_key(write_karpathy(path, REFERENCES), '"raw": ', '"raw": "x", "raw": ')
    else:
        path.write_text('{"42": ["fruit in a bowl"],\n "391895": ["a man"],\n "42": ["apples"]}')
    with pytest.raises(InputFileError, match=rf'{layout}.json: key "{key}" appears twice in one object'):
        read(path)


def test_references_nested_a_hundred_thousand_deep_are_refused_by_name(tmp_path):
    path = tmp_path / "refs.json"
    path.write_text('{"42": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputFileError, match=r"refs.json nests arrays and objects more than 100 levels deep"):
        read_references(path)


def test_coco_annotations_saved_as_utf16_are_named_as_utf16(coco):
    path = coco / "captions_val2014.json"
    path.write_bytes(path.read_text().encode("utf-16"))
    with pytest.raises(
        InputFileError, match=r"captions_val2014.json is UTF-16 \(little-endian\) text .*not UTF-8"
    ):
        read_references(path)


def test_a_results_image_id_of_5000_digits_is_refused_naming_the_file_and_line(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('[\n{"image_id": ' + "9" * 5000 + ', "caption": "a dog"}\n]')
    with pytest.raises(InputFileError, match=r"results.json has a number of 5000 digits at line 2"):
        read_caption_files([path])
