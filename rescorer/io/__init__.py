"""Files: the Moses phrase-table format (table; columns, its chunk-at-once fast path;
reordering, telling a reordering table from it), the openers for -/gzip/plain (inputs), atomic
output (outputs), JSON files (jsonfiles), and source-boundary chunks. Never imports torch."""
