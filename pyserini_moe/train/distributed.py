"""Data-parallel training with ``torch.distributed`` (``torchrun``), in-batch negatives across ranks.

Every rank takes a contiguous slice of each global batch (the recipe's ``batch_size`` queries,
as one process would see them), encodes only its slice, then gathers every rank's encodings in
the single-process layout: all queries; all positives, then all hard negatives query by query.
The loss is computed on the whole gathered batch on every rank (so every query meets every
passage of the global batch, and models' own losses such as CAME's work unchanged), gradients
flow back only through the rank's own slice, and summing the gradients over ranks gives exactly
the single-process gradient. With dropout, ranks draw other masks than one process would, so
losses agree in distribution, not bit for bit.

Launch: ``torchrun --nproc_per_node 2 -m pyserini_moe.train --config ...`` (gloo on CPU, NCCL on
GPUs: one device per rank, ``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.base import Encoded


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's place in the group."""

    rank: int
    world: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def counts(self, n: int) -> list[int]:
        """How many of ``n`` examples each rank takes (contiguous, sizes differ by at most 1)."""
        if n < self.world:
            raise UserError(f"a batch of {n} queries cannot be split over {self.world} ranks: "
                            "raise training.batch_size")
        return [n // self.world + (r < n % self.world) for r in range(self.world)]

    def local(self, items: Sequence[Any]) -> list[Any]:
        counts = self.counts(len(items))
        start = sum(counts[:self.rank])
        return list(items[start:start + counts[self.rank]])


def init_from_env() -> Ranks | None:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1); None otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return Ranks(dist.get_rank(), dist.get_world_size())


def local_device() -> str:
    """The device of this rank: ``cuda:LOCAL_RANK`` with GPUs, else the CPU."""
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return "cpu"


def gather_rows(x: torch.Tensor, ranks: Ranks, counts: list[int]) -> torch.Tensor:
    """Concatenate every rank's ``x`` [counts[r], ...] along dim 0; the own slice keeps its
    gradient. A second dimension that differs between ranks (token positions) is zero-padded
    to the longest."""
    length = torch.tensor([x.shape[1] if x.dim() > 1 else 0], device=x.device)
    lengths = [torch.zeros_like(length) for _ in range(ranks.world)]
    dist.all_gather(lengths, length)
    longest = int(max(t.item() for t in lengths))
    padded = x
    if x.dim() > 1 and x.shape[1] < longest:
        pad = [0, 0] * (x.dim() - 2) + [0, longest - x.shape[1]]
        padded = F.pad(x, pad)
    rows = max(counts)
    if padded.shape[0] < rows:
        padded = F.pad(padded, [0, 0] * (x.dim() - 1) + [0, rows - padded.shape[0]])
    parts = [torch.empty_like(padded) for _ in range(ranks.world)]
    dist.all_gather(parts, padded.detach().contiguous())
    parts[ranks.rank] = padded  # the own slice, with its autograd history
    return torch.cat([part[:n] for part, n in zip(parts, counts)])


def gather_queries(q: Encoded, ranks: Ranks, counts: list[int]) -> Encoded:
    """Every rank's query encodings, in global order."""
    return _gather(q, lambda tensor: gather_rows(tensor, ranks, counts))


def gather_passages(p: Encoded, ranks: Ranks, counts: list[int]) -> Encoded:
    """Every rank's passages in the single-process layout: all positives, then all negatives.

    A rank's passages are its k positives followed by its k * n negatives (the collator's
    layout), n the same on every rank.
    """
    k = counts[ranks.rank]

    def regroup(tensor: torch.Tensor) -> torch.Tensor:
        per_query = (tensor.shape[0] - k) // k
        positives = gather_rows(tensor[:k], ranks, counts)
        negatives = gather_rows(tensor[k:], ranks, [c * per_query for c in counts])
        return torch.cat([positives, negatives])

    return _gather(p, regroup)


def _gather(enc: Encoded, gather: Callable[[torch.Tensor], torch.Tensor]) -> Encoded:
    """``enc`` with every representation gathered; a rank's own regulariser terms (``aux_loss``,
    ``routing``) stay local."""
    out = Encoded(aux_loss=enc.aux_loss, routing=enc.routing)
    for name in ("dense", "sparse", "multi", "mask"):
        tensor = getattr(enc, name)
        if tensor is not None:
            setattr(out, name, gather(tensor))
    return out


def sum_gradients(model: torch.nn.Module) -> None:
    """All-reduce (sum) every gradient: each rank holds the gradient through its own slice."""
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)


def barrier(ranks: Ranks | None) -> None:
    if ranks is not None:
        dist.barrier()
