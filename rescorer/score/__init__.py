"""rescorer score: numpy pair containers (pairs, no torch), the batched scorer (scorer) and the
streaming driver with workers, resume and shards (pipeline)."""
