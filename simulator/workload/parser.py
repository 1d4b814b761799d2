"""Read an ASTRA-sim 1.0 / SimAI text workload file into a :class:`Workload`.

Line 1 is the header (:mod:`.header`), line 2 the number of layer rows, then one row per layer
(:mod:`.rows`). Anything malformed raises a one-line :class:`WorkloadError` naming
``path:line:column``, the field, what was expected and what was found; nothing else escapes.
Which layout the rows are in (the whole model once, or one AICB stage unrolled over ``ga``
microbatches) is decided after parsing, by :mod:`.aicb`.
"""

from __future__ import annotations

import re

from ..errors import ConfigError, WorkloadError
from ..input_file import MAX_WORKLOAD_BYTES, InputFileError, read_input_bytes
from .aicb import detect_layout
from .header import check_layer_refs, parse_header
from .model import Workload
from .rows import MAX_INT, column_of, end_column, parse_rows, to_int
from .stage_layers import check_stage_layers

# how a file's rows may be read (``--layout``; every reader of the option takes it from here)
LAYOUTS = ("auto", "model", "aicb")
# C0 controls other than tab, LF, VT, FF, CR, plus DEL: binary junk, never part of a text file
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def parse_workload_text(text: str, path: str = "<string>") -> Workload:
    """Parse the file's text; ``path`` is only used in messages and stored on the result."""
    path = str(path)
    if text.startswith("\ufeff"):
        text = text[1:]
    junk = _CONTROL_RE.search(text)
    if junk is not None:
        at = junk.start()
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        raise WorkloadError(path, line, column, "text", "a text workload file", junk.group())
    if "\n" not in text and "\r" in text.rstrip("\r"):
        # classic Mac text: every line ends in a bare CR, so the file reads as one long line
        raise WorkloadError(path, 1, text.index("\r") + 1, "line breaks",
                            "lines ending in LF or CRLF (convert with: tr '\\r' '\\n')",
                            f"no line breaks ({text.count(chr(13))} bare CRs)")
    lines = text.split("\n")
    parsed = parse_header(lines[0], path)
    declared = _declared_rows(lines[1] if len(lines) > 1 else "", path)
    layers = parse_rows(lines[2:], 3, parsed.header.policy, path)
    if len(layers) != declared:
        counts = f"line 2 declares {declared} layer rows, found {len(layers)}"
        if len(layers) > declared:
            surplus = layers[declared].line
            raise WorkloadError(path, surplus, column_of(lines[surplus - 1], 0), "layer count",
                                f"no rows after the last declared one ({counts})")
        raise WorkloadError(path, 2, column_of(lines[1], 0), "layer count",
                            f"as many layer rows as declared ({counts})")
    check_layer_refs(parsed, len(layers), path)
    return Workload(path=path, header=parsed.header, layers=layers, warnings=parsed.warnings,
                    layout="model")


def parse_workload_bytes(data: bytes, path: str = "<bytes>") -> Workload:
    """Decode UTF-8 (an undecodable byte is an error at its line:column), then parse."""
    path = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        line_start = data.rfind(b"\n", 0, err.start) + 1
        column = len(data[line_start:err.start].decode("utf-8", errors="replace")) + 1
        raise WorkloadError(path, line, column, "encoding", "UTF-8 text",
                            f"byte 0x{data[err.start]:02x}") from None
    return parse_workload_text(text, path)


def load_workload(path, layout: str = "auto") -> Workload:
    """Read and parse the file at ``path``; ``layout`` is ``auto``, ``model`` or ``aicb``.

    ``model`` keeps the rows as the whole model. ``auto`` takes the header's ``layout:`` when it
    has one (``pipesim generate`` writes it). ``auto`` and ``aicb`` hand the parsed workload
    to :func:`.aicb.detect_layout`: it gets a workload whose ``layout`` is ``"model"`` (auto:
    decide) or ``"aicb"`` (forced: recover the stage block) and returns the final workload.
    """
    if layout not in LAYOUTS:
        raise ConfigError(f"--layout: expected one of {', '.join(LAYOUTS)}, found {layout!r}")
    try:
        data = read_input_bytes(path, MAX_WORKLOAD_BYTES)
    except InputFileError as err:
        expected = err.expected.replace("file", "workload file")
        raise WorkloadError(str(path), None, None, "file", expected, err.found) from None
    workload = parse_workload_bytes(data, str(path))
    if layout == "auto" and workload.header.layout is not None:
        layout = workload.header.layout   # the file says: never decided from the rows
    if layout != "model":
        if layout == "aicb":
            workload = workload._replace(layout="aicb")
        workload = detect_layout(workload)
    if isinstance(workload, Workload) and workload.header.stage_layers:
        # counted in transformer layers: the layout decides them
        check_stage_layers(workload)
    return workload


def _declared_rows(line: str, path: str) -> int:
    parts = line.split()
    if len(parts) > 1:
        raise WorkloadError(path, 2, column_of(line, 1), "layer count",
                            "only the number of layer rows on line 2", parts[1])
    found = parts[0] if parts else ""
    count = to_int(found)
    if count is None or not 1 <= count <= MAX_INT:
        column = column_of(line, 0) if parts else end_column(line)
        raise WorkloadError(path, 2, column, "layer count",
                            "the number of layer rows (an integer >= 1) on line 2", found)
    return count
