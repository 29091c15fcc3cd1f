"""Files: the Moses phrase-table format, the openers for -/gzip/plain and atomic output, and
source-boundary chunks. Never imports torch."""
