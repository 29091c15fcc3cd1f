"""Moses' semantics without Moses: moses.ini (read in ini, rewritten in ini_rewrite, the new
columns checked in added_columns), the log-linear combiner, the table filters, n-best reranking,
the KenLM adapter and the tokenizer. Never imports torch."""
