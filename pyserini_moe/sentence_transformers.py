"""A sentence-transformers module around a pyserini-moe model, so
``SentenceTransformer(folder, trust_remote_code=True)`` (sentence-transformers asks for it for any
module class not its own) loads a saved MoE retriever with its own weights and routes as the
model does:
``encode_query`` encodes on the query side (TASER's query experts, CoT-MoTE's Q-FFN, SB-MoE's
gate on queries), ``encode_document`` on the passage side. A plain ``encode`` is refused: such a
model has no side-free encoding. Saved model folders of dense MoE models list this module in
their ``modules.json`` (see :meth:`~pyserini_moe.modeling.folder.FolderFormat.save`).
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import torch
from sentence_transformers.base.model import BaseModel
from sentence_transformers.base.modules.module import Module

from pyserini_moe.modeling.base import Side
from pyserini_moe.modeling.folder import ST_MODEL_TYPES, load_model
from pyserini_moe.modeling.lengths import encode_length

log = logging.getLogger(__name__)

SIDES = {"query": Side.QUERY, "document": Side.PASSAGE, "passage": Side.PASSAGE,
         "corpus": Side.PASSAGE}


class MoeRetriever(Module):
    """Tokenizes like the model, at its lengths by side, and returns its dense vector as
    ``sentence_embedding``.

    ``encode_query`` cuts queries at the model's query length and ``encode_document`` passages
    at its passage length (:mod:`pyserini_moe.modeling.lengths`), the lengths ``search`` and
    ``index`` use, so a query has one vector whatever the route. Setting ``max_seq_length``
    cuts both sides there instead, as sentence-transformers' own modules do."""

    forward_kwargs = {"task"}
    save_in_root = True

    def __init__(self, model: Any, max_seq_length: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.max_seq_length = max_seq_length

    def tokenize(self, texts: list[str], task: str | None = None,
                 **kwargs: Any) -> dict[str, torch.Tensor]:
        side = SIDES.get(task or "", Side.PASSAGE)  # no task: forward refuses the batch
        length = self.max_seq_length or encode_length(self.model, side)
        return self.model.tokenize(list(texts), side, length, on_device=False)

    def forward(self, features: dict[str, Any], task: str | None = None,
                **kwargs: Any) -> dict[str, Any]:
        side = SIDES.get(task or "")
        if side is None:
            raise ValueError("a pyserini-moe retriever encodes queries and documents differently: "
                             "use encode_query / encode_document (or task='query' / 'document')")
        vector = self._vector()
        only = {"only": vector} if len(self.model.representations) > 1 else {}
        out = self.model(features["input_ids"], features["attention_mask"], side, **only)
        if vector == "multi":  # MultiVectorEncoder keeps the token vectors its mask selects
            features["token_embeddings"] = out.multi
            if out.mask is not None:
                features["attention_mask"] = out.mask
        else:
            features["sentence_embedding"] = getattr(out, vector)
        return features

    def _vector(self) -> str:
        """The dense vector; a sparse-only model's term weights (one per vocabulary entry, what
        sentence-transformers' ``SparseEncoder`` takes); a multi-vector-only model's token
        vectors (``MultiVectorEncoder``'s)."""
        if "dense" in self.model.representations:
            return "dense"
        return self.model.representations[0]

    def get_sentence_embedding_dimension(self) -> int:
        return self.get_embedding_dimension()

    def get_embedding_dimension(self) -> int:
        vector = getattr(self.model.encode(["a"], Side.QUERY, 8, only=self._vector() if len(
            self.model.representations) > 1 else None), self._vector())
        return int(vector.shape[-1])

    def save(self, output_path: str, *args: Any, **kwargs: Any) -> None:
        """The model's folder, written among the files sentence-transformers writes there."""
        self.model.save(Path(output_path), into_existing=True)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> MoeRetriever:
        path = Path(model_name_or_path) / subfolder if subfolder else Path(model_name_or_path)
        model = load_model(path, device="cpu")
        refuse_other_container(model, path)
        if model.dense_alone:  # never one expert of a fusion in silence
            log.warning("%s: a %s model in sentence-transformers: %s", path, model.model_type,
                        model.dense_alone)
        return cls(model)


def refuse_other_container(model: Any, path: Path) -> None:
    """A folder loads in the sentence-transformers class it was saved for (``SentenceTransformer``
    for a dense vector, ``SparseEncoder`` / ``MultiVectorEncoder`` for a term-weight or per-token
    model alone). Another class converts it by stacking its own untrained head on our module
    (``SparseEncoder`` adds a randomly initialised sparse autoencoder and encodes without an
    error), so the load is refused naming the class to use."""
    container = _loading_container()
    own = ST_MODEL_TYPES.get(tuple(model.representations), "SentenceTransformer")
    if container is None or container.model_type == own:
        return
    sparse = (" (its term weights: pyserini_moe.load_model(folder).encode(texts, side)"
              ".sparse)" if "sparse" in model.representations else "")
    raise ValueError(f"{path}: a {model.model_type} model loads in sentence-transformers as "
                     f"{own}(folder, trust_remote_code=True); {container.model_type} would "
                     f"convert it, adding layers no training set{sparse}")


def _loading_container() -> Any:
    """The sentence-transformers model whose loading called this module's ``load``: the loader
    passes modules no handle on it, so it is found up the call stack."""
    frame = inspect.currentframe()
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, BaseModel):
            return candidate
        frame = frame.f_back
    return None
