"""A page cannot name code that is gone: every ``simulator.`` dotted name and every repository
path that docs/ and README.md mention must resolve (a module, or an attribute of one; a file or
folder of this checkout), and every ``pipesim`` command they quote must name a sub-command and
options it has."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
DOTTED = re.compile(r"\bsimulator(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# a path of this repository as the pages quote it: starts at a top folder, no spaces or globs
PATH = re.compile(r"(?<![\w./-])((?:simulator|benchmarks|tests|docs|workloads|configs)/"
                  r"[\w./-]*[\w/])")


def resolve(dotted: str) -> str | None:
    """None if ``dotted`` names a module or an attribute of one, else what is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as e:
            if e.name is None or not ".".join(parts[:cut]).startswith(e.name):
                raise           # the module exists but imports something missing: a real error
            continue
        for i, attr in enumerate(parts[cut:], cut):
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:i])} has no {attr!r}"
            obj = getattr(obj, attr)
        return None
    return f"no module {parts[0]!r}"


def names_in(text: str) -> set[str]:
    return set(DOTTED.findall(text))


def paths_in(text: str) -> set[str]:
    out = set()
    for p in PATH.findall(text):
        p = p.rstrip(".")
        if ":" in p:
            p = p.split(":", 1)[0]
        out.add(p)
    return out


# a quoted command: in backticks, or a line of a fenced code block, starting with `pipesim SUB`
INLINE = re.compile(r"(?<!`)`(pipesim [^`]+)`")
BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
BLOCK_LINE = re.compile(r"^\$? ?(pipesim [^\n#]+)", re.M)


def commands_in(text: str) -> set[str]:
    found = {c.strip() for c in INLINE.findall(BLOCK.sub("", text))}
    for block in BLOCK.findall(text):
        found |= {c.strip() for c in BLOCK_LINE.findall(block)}
    return found


def command_problem(line: str) -> str | None:
    """None if ``line``'s sub-command exists and has every ``--option`` the line gives."""
    from simulator.cli.group import cli

    words = line.split()
    if len(words) < 2 or not re.fullmatch(r"[a-z][a-z-]*", words[1]):
        return None                      # `pipesim ...`, `pipesim --version`: nothing to check
    cmd = cli.get_command(None, words[1])
    if cmd is None:
        return f"no sub-command {words[1]!r}"
    have = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for w in words[2:]:
        opt = w.split("=", 1)[0]
        if re.fullmatch(r"--[a-z][a-z0-9-]*", opt) and opt not in have:
            return f"pipesim {words[1]} has no option {opt}"
    return None


def _cases(kind):
    for page in PAGES:
        text = page.read_text()
        found = (names_in(text) if kind == "name" else paths_in(text) if kind == "path"
                 else commands_in(text))
        for item in sorted(found):
            yield pytest.param(page.relative_to(ROOT).as_posix(), item,
                               id=f"{page.name}:{item}")


@pytest.mark.parametrize("page, dotted", list(_cases("name")))
def test_every_simulator_name_a_page_mentions_exists(page, dotted):
    missing = resolve(dotted)
    assert missing is None, f"{page} mentions {dotted}: {missing}"


@pytest.mark.parametrize("page, path", list(_cases("path")))
def test_every_repository_path_a_page_quotes_exists(page, path):
    assert (ROOT / path).exists(), f"{page} quotes {path}, which is not in the repository"


@pytest.mark.parametrize("page, line", list(_cases("command")))
def test_every_command_a_page_quotes_exists(page, line):
    problem = command_problem(line)
    assert problem is None, f"{page} quotes `{line}`: {problem}"


def test_a_wrong_command_is_caught():
    assert command_problem("pipesim run W.txt -s auto --engine evaluator") is None
    assert command_problem("pipesim simulate W.txt") == "no sub-command 'simulate'"
    assert command_problem("pipesim run W.txt --layer-by-layr") == (
        "pipesim run has no option --layer-by-layr")
    assert commands_in("run `pipesim run --json -` or\n```bash\n$ pipesim plan W --gpus 8 # note\n"
                       "```\npipesim reads files\n") == {
        "pipesim run --json -", "pipesim plan W --gpus 8"}


def test_a_wrong_name_is_caught():
    assert resolve("simulator.metrics.summary") is None
    assert resolve("simulator.metrics.summary.summarize") is None
    assert resolve("simulator.analysis.simai") == "simulator has no 'analysis'"
    assert resolve("simulator.metrics.simai_pipeline_termz") == (
        "simulator.metrics has no 'simai_pipeline_termz'")
    assert names_in("see `simulator.analysis.simai` and simulator.api.simulate.") == {
        "simulator.analysis.simai", "simulator.api.simulate"}
    assert paths_in("`simulator/analysis/simai.py:37 simai_pipeline_terms`, docs/model.md.") == {
        "simulator/analysis/simai.py", "docs/model.md"}
    assert not (ROOT / "simulator/analysis/simai.py").exists()
