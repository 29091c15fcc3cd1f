"""Moses' semantics without Moses: moses.ini, the log-linear combiner, the table filters, n-best
reranking, the KenLM adapter and the tokenizer. Never imports torch."""
