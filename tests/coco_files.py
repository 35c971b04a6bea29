"""Synthetic caption files in the official layouts, for the ``capeval score`` tests.

Each builder writes rows in the structure of a real file, named beside it; the values are made up.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

# Three COCO val2014 image ids (391895 and 522418 open cocoapi's results/captions_val2014_fakecap_results.json).
COCO_IDS = [391895, 42, 522418]
CAPTIONS = {
    391895: "a man riding a motor bike on a dirt road",
    42: "a bowl of fruit on a wooden table",
    522418: "a woman cutting a large cake",
}
REFERENCES = {
    391895: ["a man rides a motorcycle on a dirt road", "a person on a dirt bike in the countryside"],
    42: ["fruit in a bowl on a table", "a wooden table with a bowl of apples", "apples and pears in a bowl"],
    522418: ["a woman cuts a cake", "a lady with a knife and a cake"],
}


def write_images(folder: Path, names: list[str]) -> list[Path]:
    """Small random RGB pictures, one per name (the format follows the extension)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(0)
    paths = []
    for name in names:
        path = folder / name
        Image.fromarray(rng.randint(0, 256, (40, 56, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def write_coco_results(path: Path, captions: dict[int, str]) -> Path:
    # cocoapi results/captions_val2014_fakecap_results.json: [{"image_id": 391895, "caption": "..."}, ...],
    # the list pycocotools' COCO.loadRes reads.
    path.write_text(json.dumps([{"image_id": i, "caption": c} for i, c in captions.items()]))
    return path


def write_coco_annotations(path: Path, references: dict[int, list[str]]) -> Path:
    # annotations/captions_val2014.json (cocodataset.org "Data format", image captioning; read by cocoapi
    # PythonAPI/pycocotools/coco.py: dataset["images"][k]["id"], dataset["annotations"][k]["image_id"/"caption"]).
    images = [
        {
            "license": 3,
            "file_name": f"COCO_val2014_{i:012d}.jpg",
            "coco_url": f"http://images.cocodataset.org/val2014/COCO_val2014_{i:012d}.jpg",
            "height": 40,
            "width": 56,
            "date_captured": "2013-11-14 11:18:45",
            "flickr_url": "http://farm1.staticflickr.com/1/1.jpg",
            "id": i,
        }
        for i in references
    ]
    annotations, ann_id = [], 1
    # COCO lists annotations in no particular image order: interleave them to prove grouping by image_id.
    for k in range(max(len(r) for r in references.values())):
        for i, refs in references.items():
            if k < len(refs):
                annotations.append({"image_id": i, "id": ann_id, "caption": refs[k]})
                ann_id += 1
    data = {
        "info": {"description": "This is stable 1.0 version of the 2014 MS COCO dataset.", "year": 2014},
        "images": images,
        "licenses": [
            {"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/", "id": 3, "name": "BY-NC-SA"}
        ],
        "type": "captions",
        "annotations": annotations,
    }
    path.write_text(json.dumps(data))
    return path


def write_karpathy(path: Path, references: dict[int, list[str]], coco: bool = True) -> Path:
    # Karpathy's dataset_coco.json (read by ruotianluo/self-critical.pytorch scripts/prepro_labels.py and
    # karpathy/neuraltalk2 prepro.py): {"images": [{"filepath", "sentids", "filename", "imgid", "split",
    # "sentences": [{"tokens", "raw", "imgid", "sentid"}], "cocoid"}], "dataset": "coco"}; the Flickr files
    # (dataset_flickr8k.json) have no "filepath" and no "cocoid".
    images, sentid = [], 0
    for imgid, (i, refs) in enumerate(references.items()):
        sentences = []
        for raw in refs:
            tokens = raw.lower().replace(".", "").split()
            sentences.append({"tokens": tokens, "raw": raw, "imgid": imgid, "sentid": sentid})
            sentid += 1
        image = {
            "sentids": [s["sentid"] for s in sentences],
            "imgid": imgid,
            "split": "test",
            "sentences": sentences,
        }
        if coco:
            image.update(filepath="val2014", filename=f"COCO_val2014_{i:012d}.jpg", cocoid=i)
        else:
            image.update(filename=f"{i}.jpg")
        images.append(image)
    path.write_text(json.dumps({"images": images, "dataset": "coco" if coco else "flickr8k"}))
    return path


# RefCLIPScore's result keys of its CLIP-S side, read here only, so renaming them is a one-line change.
REF_CLIP_S = "clip_s"
REF_CLIP_S_SCORES = "clip_s_scores"
