"""Test collections: BEIR-layout loading (:mod:`.beir`), Pyserini exports (:mod:`.export`),
topics/qrels arguments (:mod:`.topics`) and TREC CAR paragraphs (:mod:`.car`).

The package imports nothing when it is imported (the Java ``.pth`` hook imports
:mod:`pyserini_moe` at every interpreter start-up, so it must stay light): its exported names load
their modules on first use.
"""

from pyserini_moe._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "BeirCollection": "beir",
    "KNOWN_COLLECTIONS": "beir",
    "local_collections": "beir",
    "corpus_identity": "corpus",
    "open_corpus": "corpus",
    "load_answers": "dpr",
    "write_trec_qrels": "export",
    "load_qrels": "topics",
    "load_topics": "topics",
})
