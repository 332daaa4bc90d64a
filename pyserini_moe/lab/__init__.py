"""The lab: what measures the library rather than what a user runs a retriever with.

- :mod:`.regress`, :mod:`.record`, :mod:`.smoke`: the regression runner behind
  ``python -m pyserini_moe.regress`` (run a file's steps, compare with the expected values,
  record measured ones, smoke-run the paper-scale files on stand-ins);
- :mod:`.bench`: ``python -m pyserini_moe.lab.bench`` (``make bench``), speed and memory as ratios
  measured side by side;
- :mod:`.scale`: ``make scale-check``, the training side of the paper files at MS MARCO's size on
  a synthetic collection, each stage measured and projected;
- :mod:`.checkpoints`: the checkpoint study behind ``python -m pyserini_moe.analyze checkpoints``.

The library (``modeling``, ``data``, ``encode``, ``index``, ``search``, ``eval``, ``train``,
``analyze``, the API) never imports the lab (tests/test_layers.py); the lab imports the library's
public modules and the command layer's parsers. What does not ship with the package (the GPU
driver and its plans, one-off tools) lives in the repository's ``lab/`` folder.
"""
