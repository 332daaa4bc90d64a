"""A YAML file whose aliases nest (the "billion laughs") is refused in one line before anything
walks its values; every shipped recipe and regression file is far below the bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.io import MAX_YAML_NODES, read_yaml

ROOT = Path(__file__).resolve().parents[1]


def _bomb(path: Path, levels: int = 9) -> Path:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_nested_aliases_are_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(ValueError, match="expand to more than 100,000 values: not a recipe"):
        read_yaml(_bomb(tmp_path / "bomb.yaml"), "recipe", ValueError)


def test_a_few_aliases_are_fine(tmp_path) -> None:
    small = _bomb(tmp_path / "small.yaml", levels=3)  # 9 * 9 * 9 values
    assert len(read_yaml(small, "recipe", ValueError)["l2"]) == 9


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT) for folder in ("encoders", "regressions")
                                        for p in (ROOT / folder).glob("*.yaml")), ids=str)
def test_every_shipped_file_is_far_below_the_bound(path) -> None:
    import yaml

    from pyserini_moe.io import _expanded_size

    node = yaml.compose((ROOT / path).read_text())
    assert _expanded_size(node, {}) < MAX_YAML_NODES / 10
