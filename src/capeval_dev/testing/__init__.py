"""Test fixtures and independent references: tiny models of each family, the authors' tokenisation and
OpenCLIP's file layout rebuilt, img2dataset-style shards of the shapes world."""
