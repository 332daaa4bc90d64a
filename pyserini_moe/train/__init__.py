"""Fine-tuning retrievers from a recipe:
``python -m pyserini_moe.train --config encoders/<name>.yaml``.

Split as in Tevatron: :mod:`.config` (the recipe schema), :mod:`.data` (examples, validation split,
hard negatives), :mod:`.collator` (tokenised batches), :mod:`.trainer` (the loop: contrastive loss
with in-batch and hard negatives, FLOPS and router regularisers, best-by-validation checkpoints,
exact resume) and :mod:`.__main__` (the command line).
"""

from pyserini_moe._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "ConfigError": "config",
    "DataConfig": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "CandidateBuilder": "data",
    "NEGATIVES_RUN": "data",
    "TrainingData": "data",
    "pack_batches": "data",
    "bm25_index_dir": "data",
    "load_training_data": "data",
    "DEV_TOPICS_FILE": "trainer",
    "RECIPE_FILE": "trainer",
    "Trainer": "trainer",
})
