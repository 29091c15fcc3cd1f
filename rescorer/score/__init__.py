"""rescorer score: numpy pair containers (pairs, no torch), the batched scorer (scorer) and the
streaming driver (pipeline) with its options (config), worker stages (stages), durable output
and resume (output), shard manifests (shards) and their merge (merge)."""
