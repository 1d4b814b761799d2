"""What `pipesim run` loads: only what it uses (start-up is most of a small run's cost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from simulator.cli.main import _dist_version, _LazyGroup, cli

REPO = Path(__file__).resolve().parents[2]
DOC000 = REPO / "workloads" / "doc000-1f1b-test.txt"

PROBE = """
import json, sys
from simulator.cli.main import main
rc = main(["run", sys.argv[1], "--json", sys.argv[2]])
import simpy
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"rc": rc, "loaded": loaded, "simpy": simpy.__version__,
                  "metadata": "importlib.metadata" in sys.modules}))
"""


def test_run_loads_no_heavy_modules_and_no_metadata(tmp_path):
    out = subprocess.run([sys.executable, "-c", PROBE, str(DOC000), str(tmp_path / "o.json")],
                         capture_output=True, text=True, cwd=REPO, check=True)
    d = json.loads(out.stdout.splitlines()[-1])   # the report comes first
    assert d["rc"] == 0 and json.loads((tmp_path / "o.json").read_text())["pp"] == 4
    heavy = {"numpy", "pandas", "matplotlib", "rich", "yaml", "pyarrow", "email",
             # click (read without it) and what only click imported
             "click", "uuid", "platform", "datetime", "gettext", "locale",
             # the event log's, imported only for --log-level debug; statistics (and its
             # fractions, decimal, random) only for several iterations' median
             "logging", "statistics", "fractions", "decimal",
             # only for CSV schedules (pathlib is off the path too, but an editable install's
             # import hook loads it before pipesim does)
             "csv",
             # no class on the run path is a dataclass (simulator/__init__.py), and inspect
             # (with ast, dis, tokenize) is read only for a schedule's options
             "dataclasses", "inspect", "ast", "dis", "tokenize"}
    assert heavy & set(d["loaded"]) == set()
    # off the path whenever SimPy is installed with a plain dist-info (pip's way)
    assert d["metadata"] is (_dist_version("simpy") is None)
    # SimPy still knows its own version, the one importlib.metadata reads
    from importlib.metadata import version
    assert d["simpy"] == version("simpy")


def test_dist_version_reads_the_installed_metadata():
    from importlib.metadata import version
    assert _dist_version("simpy") == version("simpy")
    assert _dist_version("no-such-dist-here") is None


def test_unknown_and_private_command_names_are_not_commands(capsys):
    group = _LazyGroup()
    assert group.get_command(None, "nosuch") is None
    assert group.get_command(None, "_private") is None
    assert group.get_command(None, "run_x") is None       # modules a_b are the command a-b only
    assert group.get_command(None, "run").name == "run"
    assert "run" in cli.list_commands(None) and "schedule" in cli.list_commands(None)


def test_run_gives_the_cyclic_collector_back(tmp_path, capsys):
    import gc

    from simulator.cli.main import main
    assert gc.isenabled()
    assert main(["run", str(DOC000), "--json", str(tmp_path / "o.json")]) == 0
    assert main(["run", str(tmp_path / "missing.txt")]) == 2      # an error path too
    assert gc.isenabled()
    assert "missing.txt" in capsys.readouterr().err


def test_the_script_writes_every_output_whole_and_exits_with_the_run_code(tmp_path):
    """`python -m simulator` is the script's path (main() reading sys.argv, the process ending
    with it): outputs are complete and errors keep their exit code and one line."""
    out = subprocess.run([sys.executable, "-m", "simulator", "run", str(DOC000), "--json",
                          str(tmp_path / "o.json"), "--trace", str(tmp_path / "t.json")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "" and out.stdout.startswith("pipesim: 1f1b")
    assert json.loads((tmp_path / "o.json").read_text())["pp"] == 4
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    bad = subprocess.run([sys.executable, "-m", "simulator", "run", "missing.txt"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == ("pipesim: error: missing.txt: file: expected a readable workload file, "
                          "found 'No such file or directory'\n")
