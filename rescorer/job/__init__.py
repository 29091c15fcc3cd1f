"""The streamed job that ``rescorer score`` and ``rescorer extend`` both run over a phrase
table: its durable output (output), progress record (record), the files it may write (clobber),
shard manifests (shards) and their merge (merge). No torch here."""
