"""Test collections: BEIR-layout loading (:mod:`.beir`), Pyserini exports (:mod:`.export`),
topics/qrels arguments (:mod:`.topics`) and TREC CAR paragraphs (:mod:`.car`).

Deliberately empty: :mod:`.paths` is imported at every interpreter start-up (through the Java
``.pth`` hook), so this package must stay free of heavy imports. Import the submodules directly.
"""
