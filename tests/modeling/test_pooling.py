import pytest
import torch

from pyserini_moe.modeling.pooling import pool


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    hidden = torch.tensor([[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]],
                           [[0.0, 1.0], [2.0, 3.0], [-5.0, 7.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return hidden, mask


def test_cls_takes_first_token() -> None:
    hidden, mask = _batch()
    assert torch.equal(pool(hidden, mask, "cls"), hidden[:, 0])


def test_mean_ignores_padding() -> None:
    hidden, mask = _batch()
    expected = torch.tensor([[2.0, -1.0], [-1.0, 11.0 / 3.0]])
    torch.testing.assert_close(pool(hidden, mask, "mean"), expected)


def test_max_ignores_padding() -> None:
    hidden, mask = _batch()
    assert torch.equal(pool(hidden, mask, "max"), torch.tensor([[3.0, 2.0], [2.0, 7.0]]))


def test_unknown_pooling() -> None:
    hidden, mask = _batch()
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(hidden, mask, "median")
