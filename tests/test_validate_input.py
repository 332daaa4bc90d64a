"""The recipe checks (:mod:`pyserini_moe.validate`) refuse infinity and NaN."""

from __future__ import annotations

import math

from pyserini_moe.validate import non_negative, positive


def test_the_recipe_checks_refuse_infinity() -> None:
    assert positive(math.inf) == "must be finite" and positive(math.nan) == "must be > 0"
    assert non_negative(math.inf) == "must be finite" and non_negative(0) is None
    assert positive(3) is None and positive(None) is None
