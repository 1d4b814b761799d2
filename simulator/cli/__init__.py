"""Command-line interface (``pipesim``)."""
