"""The one reader of the JSON files users give capeval: a repeated key, deep nesting, another encoding or an
integer too long for Python is refused naming the file and the line, and every other document reads as json does."""

from __future__ import annotations

import codecs
import json
import re

import pytest

from capeval.json_files import MAX_JSON_DEPTH, InputFileError, parse_json, read_json_file

# --- JSON files: duplicate keys, nesting, encodings ---


def test_a_key_written_twice_names_the_key_and_both_lines(tmp_path):
    path = tmp_path / "cands.json"
    path.write_text('{\n  "im0": "a dog",\n  "im1": "a cat",\n  "im2": "a cow",\n\n\n  "im1": "a hen"\n}\n')
    with pytest.raises(
        InputFileError, match=re.escape(f'{path}: key "im1" appears twice in one object (lines 3 and 7)')
    ):
        read_json_file(path, "candidates")


def test_a_key_repeated_on_one_line_is_placed_by_column_and_counted():
    with pytest.raises(
        InputFileError,
        match=r'key "a" appears 3 times in one object \(line 1 column 2, line 1 column 10 and line 2 column 29\)',
    ):
        parse_json('{"a": 1, "a": 2,\n "b": {"a": [1, {"a": 0}]}, "a": 4}', "x.json")


def test_the_repeated_key_is_found_in_the_object_that_repeats_it_not_in_its_neighbours():
    text = '[\n{"id": 1, "x": "}{[\\""},\n{"id": 2,\n "id": 3}\n]'
    with pytest.raises(
        InputFileError, match=r'x.json: key "id" appears twice in one object \(lines 3 and 4\)'
    ):
        parse_json(text, "x.json")


def test_equal_keys_of_different_objects_are_not_repeats():
    assert parse_json('[{"a": 1}, {"a": 2, "b": {"a": 3}}]', "x.json") == [{"a": 1}, {"a": 2, "b": {"a": 3}}]


def test_nesting_up_to_the_limit_reads_and_one_level_more_is_refused():
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x.json") is not None
    deeper = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(
        InputFileError, match=rf"x.json nests arrays and objects more than {MAX_JSON_DEPTH} levels"
    ):
        parse_json(deeper, "x.json")


def test_a_hundred_thousand_levels_are_refused_by_name_not_by_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"im0":\n' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(
        InputFileError,
        match=r"deep.json nests arrays and objects more than 100 levels deep, starting at line 2;",
    ):
        read_json_file(path, "references")


def test_brackets_inside_strings_and_escaped_quotes_do_not_count_as_nesting():
    caption = '\\"' + "[{" * 200 + "\\\\"
    assert parse_json(f'{{"im0": "{caption}"}}', "x.json") == {"im0": '"' + "[{" * 200 + "\\"}


@pytest.mark.parametrize(
    ("encoding", "named"),
    [
        ("utf-16", r"is UTF-16 \(little-endian\) text \(it starts with that byte-order mark\), not UTF-8"),
        ("utf-16-be", r"looks like UTF-16 \(big-endian\) text, not UTF-8"),
        ("utf-16-le", r"looks like UTF-16 \(little-endian\) text, not UTF-8"),
        ("utf-32", r"is UTF-32 \(little-endian\) text"),
        ("latin-1", r"is not UTF-8 text: byte 0xe9 at line 2 \(invalid continuation byte\)"),
    ],
)
def test_a_file_in_another_encoding_is_named_with_its_encoding(tmp_path, encoding, named):
    path = tmp_path / "refs.json"
    path.write_bytes('{"im0":\n ["a café"]}'.encode(encoding))
    with pytest.raises(InputFileError, match=rf"references file {re.escape(str(path))} {named}"):
        read_json_file(path, "references")


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "cands.json"
    path.write_bytes(codecs.BOM_UTF8 + json.dumps({"im0": "a café"}).encode())
    assert read_json_file(path) == {"im0": "a café"}


def test_an_integer_longer_than_python_converts_names_its_line_and_digits():
    text = '[\n{"caption": "' + "7" * 5000 + '",\n "image_id": ' + "1" * 5000 + "}]"
    with pytest.raises(
        InputFileError, match=r"x.json has a number of 5000 digits at line 3, more than Python converts"
    ):
        parse_json(text, "x.json")


def test_a_missing_file_and_bad_json_name_the_file(tmp_path):
    with pytest.raises(InputFileError, match=re.escape(f"candidates file not found: {tmp_path / 'no.json'}")):
        read_json_file(tmp_path / "no.json", "candidates")
    (tmp_path / "bad.json").write_text('{"im0": }')
    with pytest.raises(InputFileError, match=r"bad.json is not valid JSON: Expecting value: line 1 column 9"):
        read_json_file(tmp_path / "bad.json", "candidates")


def test_documents_read_as_the_json_module_reads_them():
    text = '{"images": [{"id": 42, "sentences": [{"raw": "a \\"dog\\"", "x": 1.5e3}]}], "n": null, "t": true}'
    assert parse_json(text, "x.json") == json.loads(text)
    assert parse_json(text.encode(), "x.json") == json.loads(text)
