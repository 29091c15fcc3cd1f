"""rescorer extend: the model's own target phrases for a table's source phrases, new pairs
only, as a fill-up table or a second table (docs/extend.md). The streamed job it drives is
:mod:`rescorer.job`; its options are in config, its worker stages (no torch) in stages, the
batched beam search in beam, the features of a new pair in features, the job's plug in
pipeline."""
