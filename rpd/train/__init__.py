"""Training through a schedule's semantics: update plans, the one stale block-SGD core, the methods."""
