import math

import torch

from pyserini_moe.modeling.losses import contrastive_loss, flops


def test_contrastive_loss_by_hand() -> None:
    # 2 queries, passages [pos0, pos1, hard negative]
    scores = torch.tensor([[3.0, 1.0, 0.5], [0.0, 2.0, 1.0]])
    positive = torch.tensor([0, 1])
    for t in (1.0, 0.5):
        by_hand = [-(s[p] / t - math.log(sum(math.exp(x / t) for x in s.tolist())))
                   for s, p in zip(scores, positive.tolist())]
        expected = torch.tensor(by_hand).mean()
        torch.testing.assert_close(contrastive_loss(scores, positive, temperature=t), expected)


def test_flops_by_hand() -> None:
    w = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    assert flops(w).item() == (2.0 ** 2 + 0.0 + 1.0 ** 2)
