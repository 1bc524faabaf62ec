"""Each engine's step as the kernels it issues on each stream (`common` holds the shared
pieces; one module per engine)."""
