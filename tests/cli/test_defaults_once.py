"""Each option's default is one value: the command line's flag and the library's settings field
of the same name (``SearchSettings``, ``BuildSettings``) agree, so `search` and `index` do what
the Python API and the analyses do when a flag is left out."""

from __future__ import annotations

import dataclasses

import pytest

from pyserini_moe.cli.index import build_parser as index_parser
from pyserini_moe.cli.search import build_parser as search_parser
from pyserini_moe.index.encoded import BuildSettings
from pyserini_moe.search.dispatch import SearchSettings

# Flags whose command-line default stands for "not given" and is resolved by the command
# (None: the index's recorded value, or a value the command derives), with why.
RESOLVED_BY_THE_COMMAND = {
    "retriever": "search: the kind the index records; index: bm25",
    "index": "required",
    "encoder": "the encoder the index records",
    "device": "CUDA when present",
    "precision": "--fp16 / --bf16 switches",
    "compression": "none, spelt 'none' on the command line",
    "query_max_length": "the length the index records",
}


@pytest.mark.parametrize("parser,settings", [(search_parser, SearchSettings),
                                             (index_parser, BuildSettings)],
                         ids=["search", "index"])
def test_flag_defaults_equal_the_settings_defaults(parser, settings) -> None:
    flags = {action.dest: action.default for action in parser()._actions}
    fields = {f.name: f.default for f in dataclasses.fields(settings)
              if f.default is not dataclasses.MISSING}
    shared = sorted(set(flags) & set(fields) - set(RESOLVED_BY_THE_COMMAND))
    assert len(shared) >= 5, shared  # the comparison really covers the options
    differ = {name: (flags[name], fields[name]) for name in shared if flags[name] != fields[name]}
    assert not differ, f"flag default != settings default: {differ}"
