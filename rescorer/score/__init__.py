"""rescorer score: numpy pair containers (pairs, no torch), the batched scorer (scorer) with its
prefix-tree steps (trees), and the streaming driver (pipeline) with its options (config), worker
stages (stages), durable output and resume (output), its progress record (record), the files a
run may write (clobber), the models' warnings and columns (models), shard manifests (shards)
and their merge (merge)."""
