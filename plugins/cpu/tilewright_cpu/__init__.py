"""tilewright-cpu: the reference backend. Runs every portable tile kernel on the host CPU."""

__version__ = "0.1.0"
