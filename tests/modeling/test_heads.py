import torch
from transformers import AutoModel, AutoModelForMaskedLM

from pyserini_moe.modeling.heads import UNTRAINED_BIAS, SpladeHead, maxsim, splade_head


def _brute_maxsim(q, q_mask, p, p_mask) -> torch.Tensor:
    out = torch.zeros(q.shape[0], p.shape[0])
    for a in range(q.shape[0]):
        for b in range(p.shape[0]):
            for i in range(q.shape[1]):
                if q_mask[a, i]:
                    out[a, b] += max(float(q[a, i] @ p[b, j])
                                     for j in range(p.shape[1]) if p_mask[b, j])
    return out


def test_maxsim_matches_brute_force_in_any_chunking() -> None:
    torch.manual_seed(0)
    q, p = torch.randn(3, 4, 8), torch.randn(5, 6, 8)
    q_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    p_mask = torch.ones(5, 6, dtype=torch.long)
    p_mask[1, 2:] = 0
    p_mask[4, 1:] = 0
    expected = _brute_maxsim(q, q_mask, p, p_mask)
    for max_elements in (1, 100, 2 ** 25):  # one passage per chunk, a few, all at once
        torch.testing.assert_close(maxsim(q, q_mask, p, p_mask, max_elements), expected)


def _head(path, transform: bool = True) -> tuple[SpladeHead, torch.nn.Module]:
    backbone = AutoModel.from_pretrained(path)
    return SpladeHead(backbone.config, backbone.get_input_embeddings(), transform), backbone


def test_splade_head_nonnegative_and_padding_has_no_effect(tiny_bert) -> None:
    head, _ = _head(tiny_bert)
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 32)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    weights = head(hidden, mask)
    assert weights.shape == (2, head.embedding_weight.shape[0])
    assert (weights >= 0).all() and (weights > 0).any()
    poisoned = hidden.clone()
    poisoned[0, 3:] = 1e4  # huge padding vectors must not leak into the max
    torch.testing.assert_close(head(poisoned, mask), weights)
    torch.testing.assert_close(head(hidden[:1, :3], mask[:1, :3])[0], weights[0])


def test_splade_head_gives_the_same_weights_and_gradients_in_any_row_chunking(tiny_bert) -> None:
    head, _ = _head(tiny_bert)
    torch.manual_seed(1)
    hidden = torch.randn(5, 4, 32, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    whole = head(hidden, mask)
    (grad_whole,) = torch.autograd.grad(whole.sum(), hidden)
    rows_of_one = 4 * head.embedding_weight.shape[0]  # max_elements that fit exactly one row
    for max_elements in (1, rows_of_one, 2 * rows_of_one + 1):
        chunked = head(hidden, mask, max_elements=max_elements)
        torch.testing.assert_close(chunked, whole)
        (grad,) = torch.autograd.grad(chunked.sum(), hidden)
        torch.testing.assert_close(grad, grad_whole)


def test_splade_head_projects_real_tokens_only(tiny_bert, monkeypatch) -> None:
    """The [tokens x vocabulary] product is the head's cost: padding must not pay for it."""
    head, _ = _head(tiny_bert)
    projected: list[int] = []
    logits = head.logits
    monkeypatch.setattr(head, "logits", lambda h: projected.append(h.shape[0]) or logits(h))
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
    head(torch.randn(3, 5, 32), mask)
    assert sum(projected) == 7


def test_splade_head_plain_variant_is_tied_and_has_no_transform(tiny_bert) -> None:
    head, backbone = _head(tiny_bert, transform=False)
    emb = backbone.get_input_embeddings().weight
    assert head.embedding_weight is emb and head.transform is None
    hidden = torch.randn(1, 3, 32)
    expected = torch.log1p(torch.relu(hidden @ emb.T)).max(1).values
    torch.testing.assert_close(head(hidden, torch.ones(1, 3)), expected)


def test_splade_head_loads_pretrained_mlm_weights(tiny_mlm, tiny_bert) -> None:
    backbone = AutoModel.from_pretrained(tiny_mlm)
    head, found = splade_head(backbone, tiny_mlm)
    assert found and head.embedding_weight is backbone.get_input_embeddings().weight
    mlm = AutoModelForMaskedLM.from_pretrained(tiny_mlm)
    torch.testing.assert_close(head.bias, mlm.cls.predictions.bias)
    hidden = torch.randn(1, 4, 32)
    torch.testing.assert_close(head.logits(hidden), mlm.cls.predictions(hidden))

    head, found = splade_head(AutoModel.from_pretrained(tiny_bert), tiny_bert)
    assert not found
    # no MLM weights: the bias starts negative so the initial term vectors are sparse
    assert torch.all(head.bias == UNTRAINED_BIAS) and UNTRAINED_BIAS < 0
