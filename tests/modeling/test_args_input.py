"""A model's own arguments (:mod:`pyserini_moe.modeling.args`): sizes past their bound are
refused before anything is built."""

from __future__ import annotations

import pytest

from pyserini_moe.modeling.came import CameArgs
from pyserini_moe.modeling.colbert import ColbertArgs
from pyserini_moe.modeling.sbmoe import SbMoeArgs
from pyserini_moe.modeling.taser import TaserArgs
from pyserini_moe.validate import MAX_EXPERTS, MAX_WIDTH, ConfigError

# --- sizes that allocate --------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "name", "value", "limit"), [
    (CameArgs, "dim", 10**14, MAX_WIDTH), (ColbertArgs, "dim", MAX_WIDTH + 1, MAX_WIDTH),
    (SbMoeArgs, "n_experts", 10**9, MAX_EXPERTS), (SbMoeArgs, "expert_width", 10**12, MAX_WIDTH),
    (TaserArgs, "num_experts", MAX_EXPERTS + 1, MAX_EXPERTS)])
def test_a_size_past_its_bound_is_refused_before_anything_is_built(args, name, value,
                                                                   limit) -> None:
    with pytest.raises(ConfigError, match=rf"^{name}: must be <= {limit:,}, got {value}$"):
        args(**{name: value})
    args(**{name: limit})  # the bound itself is allowed
