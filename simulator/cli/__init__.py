"""The command line (``pipesim``)."""
