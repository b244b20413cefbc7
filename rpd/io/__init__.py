"""Results on disk and elsewhere: the store, sweeps as tables, Result files, provenance, tracking."""
