"""One module per ``pipesim`` sub-command; each exposes ``command``."""
