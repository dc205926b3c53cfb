"""Data: corpora, subword vocabularies and token-based batches."""
