"""The two sides of retrieval: MoE routers and two-tower models encode each differently."""

from __future__ import annotations

from enum import Enum


class Side(str, Enum):
    QUERY = "query"
    PASSAGE = "passage"
