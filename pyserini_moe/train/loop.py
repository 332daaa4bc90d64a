"""The optimizer side of every training run, shared by fine-tuning (:mod:`.trainer`) and CoT-MAE
pre-training (:mod:`.pretrain`): AdamW over the caller's parameter groups, linear warm-up then
linear decay, gradient accumulation as the mean of the passes, clipping, and the seed.

What differs between the two runs (the data, the losses, validation, checkpoints) stays with
them; one optimizer step is written once, here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from pyserini_moe.errors import UserError

# One forward pass of an accumulated step: its loss, and the values to log.
Pass = Callable[[], tuple[torch.Tensor, dict[str, float]]]


class TrainingDiverged(UserError):
    """A non-finite loss or gradient: the update would make the weights NaN, and every later
    model (``best/``, ``last/``, the log's losses) with them; training stops before it. ``step``
    is 1-based, as the training logs number them."""

    def __init__(self, step: int, what: str) -> None:
        super().__init__(f"training diverged at step {step}: {what}; nothing from this step was "
                         "saved (lower the learning rate)")
        self.step = step


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # CUDA generators too


def linear_schedule(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate factor of (0-based) step: linear warmup, then linear decay towards 0 (BERT /
    DPR), shifted by one so that neither the first nor the last step has a zero learning rate."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return factor


class OptimizerLoop:
    """AdamW + the linear schedule over ``total_steps`` (warm-up: ``warmup_ratio`` of them)."""

    def __init__(self, model: nn.Module, groups: list[dict[str, Any]], learning_rate: float,
                 total_steps: int, warmup_ratio: float, max_grad_norm: float | None) -> None:
        self.model = model
        self.learning_rate = learning_rate
        self.max_grad_norm = max_grad_norm
        self.optimizer = torch.optim.AdamW(groups, lr=learning_rate)
        self.schedule = linear_schedule(total_steps, math.ceil(warmup_ratio * total_steps))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.schedule)

    def lr(self, step: int) -> float:
        """The base learning rate of (0-based) ``step``, for the log."""
        return self.learning_rate * self.schedule(step)

    def step(self, passes: Sequence[Pass],
             before_update: Callable[[], None] | None = None) -> tuple[float, dict[str, float]]:
        """One optimizer step: every pass's loss / len(passes) is back-propagated (their mean is
        the step's loss), ``before_update`` runs on the summed gradients (torchrun's all-reduce),
        then clipping, the update and the schedule. Returns the mean loss and mean logged parts.
        A pass that back-propagates itself (GradCache: :mod:`.grad_cache`) returns its loss
        detached, already scaled into the gradients."""
        losses: list[float] = []
        parts: dict[str, float] = {}
        for run in passes:
            loss, pass_parts = run()
            if loss.requires_grad:
                (loss / len(passes)).backward()
            losses.append(loss.item())
            for name, value in pass_parts.items():
                parts[name] = parts.get(name, 0.0) + value / len(passes)
        if before_update is not None:
            before_update()
        # Without clipping, max_norm inf only measures the norm: the gradients stay as they are.
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                              self.max_grad_norm or math.inf)
        self._refuse_divergence(sum(losses) / len(losses), float(norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return sum(losses) / len(losses), parts

    def _refuse_divergence(self, loss: float, grad_norm: float) -> None:
        """Stop before an update from a NaN / inf loss or gradient (the scheduler counts the
        steps done, resumed runs included)."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return
        raise TrainingDiverged(self.scheduler.last_epoch + 1,
                               f"the loss is {loss}" if not math.isfinite(loss)
                               else f"the gradient norm is {grad_norm}")
