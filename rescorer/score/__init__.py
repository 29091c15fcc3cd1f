"""rescorer score: numpy pair containers (pairs, no torch), the batched scorer (scorer) and the
streaming driver (pipeline) with its options (config), worker stages (stages), durable output
and resume (output) and shard manifests (shards)."""
