"""Files: the Moses phrase-table format (table), the openers for -/gzip/plain (inputs), atomic
output (outputs), JSON files (jsonfiles), and source-boundary chunks. Never imports torch."""
