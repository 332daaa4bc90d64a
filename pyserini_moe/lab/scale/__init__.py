"""The scale check: the paper files' training side at MS MARCO's size, without MS MARCO or a GPU.

Size problems (a structure quadratic in the corpus, negatives held as Python objects) need the
shape of the data at full size and a tiny model, not the real data: :mod:`.synth` writes a
synthetic MS MARCO of full size, :mod:`.stages` runs each training-side stage of the paper files
on it as the files run them (with a tiny random BERT and a few steps), :mod:`.measure` records
time, the process tree's peak memory and peak scratch disk, and :mod:`.runner` projects sampled
stages to the full run and writes the table (``python -m pyserini_moe.lab.scale``,
``make scale-check``).
"""
