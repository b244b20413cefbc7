"""Running compiled programs: the program store, JAX's compile cache, threads, Ctrl-C, size guards."""
