"""Every command that prints JSON has a schema (`--json-schema`) and its output validates
against it; every JSON output carries schema_version."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from simulator.cli.main import main

from shared_files import REAL_DIR as REAL, needs_real

DATA = Path(__file__).resolve().parents[1] / "data"

COMMANDS = {
    "run": [["run", str(REAL / "workload_analytical.txt"), "--iterations", "2", "--json", "-"],
            ["run", str(REAL / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"), "--pp", "2",
             "-s", "2bw", "-m", "4", "--json", "-"]],
    "compare": [["compare", str(DATA / "tiny_model.txt"), "-s", "1f1b,dualpipe-v,zb-v", "--pp",
                 "2", "-m", "2", "--json"]],
    "schedule": [["schedule", "zb-v", "--pp", "2", "-m", "4", "--json"]],
    "plan": [["plan", str(DATA / "tiny_model.txt"), "--gpus", "2", "-j", "1", "--json", "-"]],
    "verify": [["verify", "dualpipe-v", "--pp", "2", "-m", "4", "--json"]],
    "inspect": [["inspect", str(REAL / "workload_gpt13b_128g.txt"), "--json"],
                ["inspect", str(REAL / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"),
                 "--json"]],
}


def _out(capsys, args) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [pytest.param(c, marks=needs_real if c in ("run", "inspect")
                                                  else ()) for c in sorted(COMMANDS)])
def test_output_validates_against_the_commands_schema(command, capsys):
    schema = json.loads(_out(capsys, [command, "--json-schema"]))
    jsonschema.Draft202012Validator.check_schema(schema)
    for args in COMMANDS[command]:
        data = json.loads(_out(capsys, args))
        jsonschema.validate(data, schema)
        rows = data if isinstance(data, list) else [data]
        assert all(r["schema_version"] == "2" for r in rows)


@needs_real
def test_a_wrong_output_fails_the_schema(capsys):
    schema = json.loads(_out(capsys, ["run", "--json-schema"]))
    data = json.loads(_out(capsys, COMMANDS["run"][0]))
    data["ranks"][0]["peak_memory_bytes"] = 1.5          # bytes are integers
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


@needs_real
def test_ranks_and_the_deprecated_stages_alias(capsys):
    data = json.loads(_out(capsys, COMMANDS["run"][0]))
    assert [r["rank"] for r in data["ranks"]] == list(range(12))
    assert data["stages"] == [dict(r, stage=r["rank"]) for r in data["ranks"]]


def test_descriptions_and_required_fields_come_from_the_record_types(capsys):
    """The run summary's records are NamedTuples (a field's help is its Annotated text), compare's
    rows a dataclass (help in field metadata) that holds a NamedTuple (RunWarning): one schema
    builder reads both, and a field with a default is not required."""
    run = json.loads(_out(capsys, ["run", "--json-schema"]))
    assert run["description"] == ("One simulation, per iteration (the mean over iterations where "
                                  "there are several).")
    assert run["properties"]["pipeline_bubble_ns"] == {
        "anyOf": [{"$ref": "#/$defs/PipelineBubble"}, {"type": "null"}],
        "description": "the simulated pipeline bubble of the first iteration"}
    assert run["required"][-3:] == ["engine_used", "ranks", "links"]   # then the defaulted ones
    assert list(run["$defs"]) == ["RankSummary", "MemoryBreakdown", "LinkSummary", "RunWarning",
                                  "IterationStats", "PipelineBubble"]
    assert run["$defs"]["LinkSummary"] == {
        "type": "object",
        "properties": {"src_rank": {"type": "integer", "description": "sending rank"},
                       "dst_rank": {"type": "integer", "description": "receiving rank"},
                       "bytes": {"type": "integer", "description": "bytes moved"},
                       "transfers": {"type": "integer", "description": "transfers"},
                       "busy_ns": {"type": "number",
                                   "description": "time the link was moving data"}},
        "required": ["src_rank", "dst_rank", "bytes", "transfers", "busy_ns"],
        "description": "One directed point-to-point link, per iteration."}
    warning = {"type": "object",
               "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                              "option": {"type": "string"}},
               "required": ["code", "message"],
               "description": "One assumption a run had to make: a stable code, the message, "
                              "and the option to set."}
    assert run["$defs"]["RunWarning"] == warning
    compare = json.loads(_out(capsys, ["compare", "--json-schema"]))
    assert compare["$defs"]["RunWarning"] == warning
    assert compare["$defs"]["CompareRow"]["properties"]["speedup"] == {
        "anyOf": [{"type": "number"}, {"type": "null"}],
        "description": "baseline's time over this one's"}
