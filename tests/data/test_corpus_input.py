"""Opening a corpus (:mod:`pyserini_moe.data.corpus`): a BEIR corpus file given instead of
its folder."""

from __future__ import annotations

import pytest

from pyserini_moe.data.corpus import open_corpus
from pyserini_moe.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_beir_corpus_file_points_to_its_folder(tiny_corpus) -> None:
    with pytest.raises(UserError, match=rf'BEIR record, "_id" and "text": give --corpus '
                                        rf'{tiny_corpus}, the BEIR folder'):
        list(open_corpus(tiny_corpus / "corpus.jsonl").corpus())
