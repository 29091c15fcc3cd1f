"""The streamed job that ``rescorer score`` and ``rescorer extend`` both run over a phrase
table: the driver and the plug a command writes (run), its counts (stats), its durable output
(output), progress record (record), the files it may write (clobber), shard manifests (shards)
and their merge (merge). No torch here."""
