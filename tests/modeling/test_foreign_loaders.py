"""A saved model folder never loads silently wrong elsewhere: transformers' AutoModel and
sentence-transformers stop with an error instead of initialising every weight at random (they
found a BERT config and a model.safetensors whose prefixed keys matched nothing). Our loader reads
the folder, and folders saved under the old weights name."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.modeling import SiameseBiEncoder, Side, TaserEncoder, load_model
from pyserini_moe.modeling.base import LEGACY_WEIGHTS_FILE, WEIGHTS_FILE


@pytest.mark.parametrize("cls", [SiameseBiEncoder, TaserEncoder])
def test_foreign_loaders_refuse_and_ours_loads(cls, tiny_bert, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    torch.manual_seed(0)
    args = {"every": 1} if cls is TaserEncoder else {}  # the tiny BERT has 2 layers
    model = cls.from_backbone(tiny_bert, device="cpu", **args).eval()
    folder = model.save(tmp_path / "model")
    assert (folder / WEIGHTS_FILE).is_file() and not (folder / LEGACY_WEIGHTS_FILE).exists()
    with pytest.raises(OSError):
        AutoModel.from_pretrained(folder)
    with pytest.raises(OSError):
        SentenceTransformer(str(folder), device="cpu")
    again = load_model(folder, device="cpu")
    torch.testing.assert_close(again.encode(["a cat"], Side.QUERY).dense,
                               model.encode(["a cat"], Side.QUERY).dense)


def test_a_folder_saved_under_the_old_weights_name_still_loads(tiny_bert, tmp_path) -> None:
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    folder = model.save(tmp_path / "old")
    (folder / WEIGHTS_FILE).rename(folder / LEGACY_WEIGHTS_FILE)
    torch.testing.assert_close(load_model(folder, device="cpu").encode(["a cat"], Side.QUERY).dense,
                               model.encode(["a cat"], Side.QUERY).dense)
