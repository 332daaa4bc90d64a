"""Tests here run tiny models: single-threaded (see ``one_thread`` in tests/conftest.py); a
saved folder of every model kind (``saved``)."""

from pathlib import Path

import pytest
import torch

from pyserini_moe.modeling import (
    CameEncoder,
    ColbertEncoder,
    CotMoteEncoder,
    DprBiEncoder,
    SbMoeEncoder,
    SiameseBiEncoder,
    SpladeEncoder,
    TaserEncoder,
)


@pytest.fixture(autouse=True)
def _single_threaded(one_thread):
    yield


QUERY_LENGTH = 6  # shorter than the queries below, so a route that cuts elsewhere differs
BUILD = {
    "siamese": lambda bert, mlm: SiameseBiEncoder.from_backbone(bert, device="cpu"),
    "dpr": lambda bert, mlm: DprBiEncoder.from_backbone(bert, device="cpu"),
    "taser": lambda bert, mlm: TaserEncoder.from_backbone(bert, every=1, device="cpu"),
    "sbmoe": lambda bert, mlm: SbMoeEncoder.from_backbone(bert, n_experts=3, device="cpu"),
    "cotmote": lambda bert, mlm: CotMoteEncoder.from_backbone(mlm, sparse_top_k=12,
                                                               device="cpu"),
    "came": lambda bert, mlm: CameEncoder.from_backbone(mlm, shared_layers=1, dim=8,
                                                         device="cpu"),
    "colbert": lambda bert, mlm: ColbertEncoder.from_backbone(bert, dim=16, device="cpu"),
    "splade": lambda bert, mlm: SpladeEncoder.from_backbone(mlm, device="cpu"),
}


@pytest.fixture(params=sorted(BUILD))
def saved(request, tiny_bert, tiny_mlm, tmp_path) -> Path:
    """A model of each kind, its sides apart (as after training), trained at QUERY_LENGTH."""
    torch.manual_seed(0)
    model = BUILD[request.param](tiny_bert, tiny_mlm).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.02 * torch.randn_like(param))
    model.query_max_length = QUERY_LENGTH
    return model.save(tmp_path / request.param)
