"""Hostile pass 4, the poor cases: misleading or silent behaviour that was not yet a fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.train.config import ConfigError, load_config


def test_a_recipe_key_written_twice_is_refused(tmp_path: Path) -> None:
    """H4-32: YAML keeps the last of two ``training:`` blocks in silence; a recipe pasted twice
    trained with the second block only."""
    recipe = tmp_path / "dup.yaml"
    recipe.write_text("output_dir: out\nmodel: {type: siamese}\ndata: {collection: scifact}\n"
                      "training: {learning_rate: 1.0e-4, max_steps: 2}\n"
                      "training: {learning_rate: 1.0e-4, max_steps: 1}\n")
    with pytest.raises(ConfigError, match="the key 'training' is written twice in one mapping"):
        load_config(recipe)


def test_a_merge_key_may_still_override_what_it_merges(tmp_path: Path) -> None:
    recipe = tmp_path / "merge.yaml"
    recipe.write_text("output_dir: out\nmodel: {type: siamese}\ndata: {collection: scifact}\n"
                      "training: {<<: {learning_rate: 1.0e-4, max_steps: 2}, max_steps: 1}\n")
    assert load_config(recipe).training.max_steps == 1


def test_a_work_dir_that_is_a_file_is_said_so(tmp_path: Path, capsys) -> None:
    """H4-39: the runner said "[Errno 20] Not a directory: '<file>/<regression>'"."""
    from pyserini_moe.cli import regress, run_main

    work = tmp_path / "work"
    work.write_text("a file")
    code = run_main(regress.main, ["regressions/bm25-scifact.yaml", "--work-dir", str(work),
                                   "--dry-run"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --work-dir {work} is a file: name a folder (made if missing)")


@pytest.mark.parametrize(("table", "warned"), [
    ({0.5: 0.30, 0.6: 0.25, 0.7: 0.20}, True),    # still rising towards the lower end
    ({0.5: 0.20, 0.6: 0.25, 0.7: 0.30}, True),    # towards the upper end
    ({0.5: 0.20, 0.6: 0.30, 0.7: 0.25}, False),   # an inner optimum
    ({0.5: 0.30, 0.6: 0.30, 0.7: 0.30}, False)])  # a level curve: nothing beyond to gain
def test_a_tuned_alpha_at_the_grid_edge_is_said(capsys, table: dict, warned: bool) -> None:
    """H4-63: tuning ended at the grid's lowest alpha, still rising, without a word."""
    from pyserini_moe.cli.fuse import _say_if_at_the_edge

    _say_if_at_the_edge(max(table, key=table.__getitem__), table)
    assert ("is at the end of the grid (0.5..0.7)" in capsys.readouterr().err) == warned


def test_fused_search_refuses_indexes_of_two_models_before_loading_either(tmp_path: Path) -> None:
    """H4-52: a dense index of one model and an impact index of another were fused without a
    word, although a fused search sums one model's expert scores."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.index.meta import write_meta
    from pyserini_moe.search.experts import ExpertFusionSearcher

    for kind, model in (("dense", "aaaa"), ("impact", "bbbb")):
        (tmp_path / kind).mkdir()
        write_meta(tmp_path / kind, kind, encoder=f"/models/{model}", encoder_fingerprint=model)
    with pytest.raises(UserError, match="were built by different models; --retriever fused "
                                        "fuses the experts of one model"):
        ExpertFusionSearcher([tmp_path / "dense", tmp_path / "impact"])
    (tmp_path / "impact2").mkdir()
    write_meta(tmp_path / "impact2", "dense", encoder="/models/aaaa", encoder_fingerprint="aaaa")
    with pytest.raises(UserError, match="two indexes of the same kind"):
        ExpertFusionSearcher([tmp_path / "dense", tmp_path / "impact2"])


def test_sizes_reports_every_architecture_a_small_backbone_can_hold(tiny_bert, capsys) -> None:
    """H4-46: one architecture needing more layers (TASER's T=2 on 2 layers) refused the table."""
    from pyserini_moe.cli import run_main, sizes

    assert run_main(sizes.main, ["--backbone", str(tiny_bert)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert any(r.startswith("| siamese | ") and r.endswith("M |") for r in rows)
    assert "| taser det-r (T=2, I=2) | cannot be built: every=2 leaves no specialised block in 2 " \
           "layers |" in rows


@pytest.mark.parametrize(("args", "words"), [
    (["pooling", "mean"], "'args' is list, not a mapping"), (None, "'args' is NoneType"),
    ({"normalize": "yes"}, "siamese model argument normalize: expected true or false")])
def test_damaged_saved_arguments_name_the_model_file(tiny_bert, tmp_path: Path, args,
                                                     words: str) -> None:
    """Pass 5, H5-08/09/11: a saved folder whose ``args`` were a list or null ended in a
    TypeError traceback; a bad value did not name the folder."""
    import json

    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.modeling.base import MODEL_FILE, load_model

    folder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m")
    meta = json.loads((folder / MODEL_FILE).read_text())
    meta["args"] = args
    (folder / MODEL_FILE).write_text(json.dumps(meta))
    with pytest.raises(UserError, match=f"^{folder / MODEL_FILE}: .*{words}"):
        load_model(folder, device="cpu")


def test_pretrain_refuses_a_seed_numpy_cannot_take() -> None:
    """Pass 5, H5-13: --seed -5 ended in numpy's traceback after the backbone loaded."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.train.pretrain import PretrainArgs

    with pytest.raises(UserError, match=r"seed: must be in \[0, 2\*\*32\), got -5"):
        PretrainArgs(backbone="b", corpora=("scifact",), seed=-5).check()


def test_a_multivector_search_refuses_ef_search_it_would_ignore() -> None:
    """Pass 5, H5-22: --ef-search was silently ignored on a multi-vector index."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match="^--ef-search: not used by a multivector search"):
        SearchSettings(retriever="multivector", index="i", ef_search=50)
