"""``click.echo`` for plain text without importing click (see :mod:`.run_impl`)."""

from __future__ import annotations

import codecs
import sys


def echo(text: str, err: bool = False) -> None:
    """``click.echo(text, err=err)`` without importing click for plain text on a usable stream
    (click writes such text unchanged); anything else goes through click itself."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    encoding = getattr(stream, "encoding", None)
    if "\x1b" in text or not encoding or getattr(stream, "errors", None) is None \
            or _is_ascii(encoding):
        import click   # only for what plain writing cannot do: a plain run does without click

        click.echo(text, err=err)
        return
    stream.write(text + "\n")
    stream.flush()


def _is_ascii(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return False
