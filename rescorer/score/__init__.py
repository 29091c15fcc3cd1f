"""rescorer score: numpy pair containers (pairs, no torch), the batched scorer (scorer) with its
prefix-tree steps (trees), and the streaming driver (pipeline) with its options (config), worker
stages (stages) and the models' warnings and columns (models). The streamed job it drives
(output, record, clobber, shards, merge) is :mod:`rescorer.job`."""
