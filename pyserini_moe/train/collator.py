"""Examples -> tokenised tensors, each side with its own tokenisation and length limit."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pyserini_moe.modeling.base import RetrievalModel, Side
from pyserini_moe.train.data import Example


@dataclass
class Batch:
    """Queries [B] and passages [B positives, then B * n negatives, query by query].

    ``positive_index[i] = i``: every other passage in the batch (the other queries' positives and
    all hard negatives) is a negative for query i, as in DPR / TASER eq. 2.
    """

    queries: dict[str, torch.Tensor]
    passages: dict[str, torch.Tensor]
    positive_index: torch.Tensor

    @property
    def size(self) -> int:
        return len(self.positive_index)


class Collator:
    """Tokenises with the model's own ``tokenize`` (queries as Side.QUERY, passages as
    Side.PASSAGE), which also puts the tensors on the model's device."""

    def __init__(self, model: RetrievalModel, query_max_length: int,
                 passage_max_length: int) -> None:
        self.model = model
        self.query_max_length = query_max_length
        self.passage_max_length = passage_max_length

    def __call__(self, examples: list[Example]) -> Batch:
        passages = [e.positive for e in examples] + [n for e in examples for n in e.negatives]
        queries = self.model.tokenize([e.query for e in examples], Side.QUERY,
                                      self.query_max_length)
        return Batch(queries=queries,
                     passages=self.model.tokenize(passages, Side.PASSAGE, self.passage_max_length),
                     positive_index=torch.arange(len(examples), device=queries["input_ids"].device))
