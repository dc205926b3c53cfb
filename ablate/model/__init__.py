"""The model: its spec beside the Transformer that is built from it, beam search, and the diagnostics
that look inside it. Knows nothing of training, sweeps or reports."""
