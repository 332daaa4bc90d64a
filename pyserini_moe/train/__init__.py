"""Fine-tuning retrievers from a recipe:
``python -m pyserini_moe.train --config encoders/<name>.yaml``.

Split as in Tevatron: :mod:`.config` (the recipe schema), :mod:`.data` (examples, validation split,
hard negatives), :mod:`.collator` (tokenised batches), :mod:`.trainer` (the loop: contrastive loss
with in-batch and hard negatives, FLOPS and router regularisers, best-by-validation checkpoints,
exact resume) and :mod:`.__main__` (the command line).
"""
