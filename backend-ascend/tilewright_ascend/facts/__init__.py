"""Facts about A2/A3 that every layer of the backend reads: the machine (memories, SoCs), pipes
and events, data paths, dtypes, fractal layouts, the dialect's op schemas and the IR keys."""
