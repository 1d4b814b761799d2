"""No silent default (issue 35): every header key a file leaves out is, in the run, a warning
naming it, a refusal, or a key no number of the run depends on (``ep:`` without
expert-parallel rows), on the bundled workloads and a freshly generated file, one key at a time;
``--strict`` refuses each warned one in one line; a fully stated generated file passes
``--strict``, and one generated with options left to their defaults says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.main import main

from benchmarks.bench_silent_defaults import GENERATE, KEYS, no_number_depends_on, bundled, without

REPO = Path(__file__).resolve().parents[2]
BUNDLED = [str(p.relative_to(REPO)) for p in bundled()]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("gen") / "llama-8l.txt"
    assert main([*GENERATE, "-o", str(out)]) == 0
    return str(out)


def _run(capsys, path: Path, *args: str) -> tuple[int, dict | None, str]:
    rc = main(["run", str(path), "--json", "-", *args])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out) if rc == 0 else None, captured.err


@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize("source", BUNDLED + ["generated"])
def test_a_left_out_key_is_a_warning_or_a_refusal(source, key, generated, tmp_path, capsys):
    path = Path(generated if source == "generated" else REPO / source)
    cut = tmp_path / path.name
    cut.write_text(without(path.read_text(), key))
    rc, d, err = _run(capsys, cut)
    if rc == 2:                        # refused: one line saying why
        assert len(err.splitlines()) == 1 and err.startswith("pipesim: error: ")
        return
    assert rc == 0
    codes = [w["code"] for w in d["warnings"]]
    if not set(codes) & set(KEYS[key]):
        # no warning: only for a key the run's numbers do not depend on
        assert key == "ep" and no_number_depends_on(path, key, cut, json.dumps(d)), (key, codes)
        return
    # and --strict refuses it, in one line
    assert main(["run", str(cut), "--strict"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("pipesim: error: --strict: ")


def test_what_a_user_sees_for_a_header_without_pp_and_ga(tmp_path, capsys):
    text = (REPO / "workloads" / "gpt-24l.txt").read_text()
    cut = tmp_path / "gpt.txt"
    cut.write_text(without(without(text, "pp"), "ga"))
    rc, d, _ = _run(capsys, cut)
    assert rc == 0 and (d["pp"], d["microbatches"]) == (1, 1)
    assert d["warnings"][:2] == [
        {"code": "pp_defaulted", "message": f"{cut}:1: header has no pp:; using pp 1 (one "
         "stage, no pipeline)", "option": "--pp or pp: in the header"},
        {"code": "ga_defaulted", "message": f"{cut}:1: header has no ga:; using 1 microbatch "
         "per iteration", "option": "-m or ga: in the header"}]
    assert main(["run", str(cut)]) == 0
    out = capsys.readouterr().out
    assert (f"  ! {cut}:1: header has no pp:; using pp 1 (one stage, no pipeline) [set --pp or "
            "pp: in the header]\n") in out
    assert main(["run", str(cut), "--strict"]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: --strict: {cut}:1: header has no pp:; using pp 1 (one stage, no "
        "pipeline) (set --pp or pp: in the header) [pp_defaulted]\n")
    # the options state them: no default left to warn about
    rc, d, _ = _run(capsys, cut, "--pp", "4", "-m", "16")
    assert not {"pp_defaulted", "ga_defaulted"} & {w["code"] for w in d["warnings"]}


def test_a_fully_stated_generated_file_passes_strict(generated, capsys):
    rc, d, err = _run(capsys, Path(generated), "--strict", "--param-dtype", "bf16")
    assert (rc, err) == (0, "")
    assert d["warnings"] == []
    # the activations from the model's shape are a derivation: a note
    assert any(n.startswith("activation memory from the model's shape") for n in d["notes"])


def test_a_detected_layout_is_a_warning_and_a_stated_one_is_honoured(tmp_path, capsys):
    """A generated 48-layer model-layout file at ga 48 repeats one layer's rows 48 times: read
    as an AICB stage trace unless the header says otherwise, and generate says so."""
    out = tmp_path / "g48.txt"
    assert main(["generate", "--model", "gpt", "--layers", "48", "--hidden", "1024", "--heads",
                 "8", "--seq", "1024", "--micro-batch", "1", "--pp", "4", "--ga", "48",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text()
    assert " layout: model generated_defaults: " in text.split("\n", 1)[0]
    rc, stated, _ = _run(capsys, out)
    assert rc == 0 and stated["layout"] == "model"
    assert "layout_detected" not in [w["code"] for w in stated["warnings"]]
    bare = tmp_path / "bare.txt"
    bare.write_text(text.replace(" layout: model", "", 1))
    rc, detected, _ = _run(capsys, bare)
    assert rc == 0 and detected["layout"] == "aicb"
    assert detected["makespan_ns"] < stated["makespan_ns"] / 5
    assert [w for w in detected["warnings"] if w["code"] == "layout_detected"] == [{
        "code": "layout_detected", "option": "--layout model|aicb or layout: in the header",
        "message": f"{bare}: read as an AICB stage trace (one stage of 4 unrolled over the "
                   "microbatches): the header has ga: 48 and no layout:, and lines 4-195 are "
                   "48 repeats of a 4-row block of 1 transformer layer(s)"}]
    assert main(["run", str(bare), "--strict", "--layout", "model", "--json", "-"]) == 2
    assert "[layout_detected]" not in capsys.readouterr().err
    # inspect says the same
    for path, said in ((bare, detected), (out, stated)):
        assert main(["inspect", str(path), "--json", "-"]) == 0
        facts = json.loads(capsys.readouterr().out)
        assert facts["layout_detected"] == "".join(
            w["message"] for w in said["warnings"] if w["code"] == "layout_detected")


def test_the_options_generate_filled_in_are_a_warning_until_the_run_decides_them(tmp_path,
                                                                                capsys):
    out = tmp_path / "g.txt"
    assert main(["generate", "--model", "gpt", "--layers", "8", "--hidden", "1024", "--heads",
                 "8", "--seq", "1024", "--micro-batch", "1", "--pp", "2", "-o", str(out)]) == 0
    capsys.readouterr()
    rc, d, _ = _run(capsys, out)
    assert [w for w in d["warnings"] if w["code"] == "generated_default"] == [{
        "code": "generated_default", "option": "those options to pipesim generate",
        "message": f"{out}:1: pipesim generate wrote it with options filled in "
                   "(generated_defaults: gpu=a100,tp=1,vpp=1,ga=1,dp=1,precision=bf16,"
                   "vocab=50257); the rows and the header assume --gpu a100, --tp 1, --vpp 1, "
                   "--ga 1, --dp 1, --precision bf16, --vocab 50257"}]
    # -m, --gpus and --vpp decide three of them; the others are in the rows
    rc, d, _ = _run(capsys, out, "-m", "4", "--gpus", "4", "--vpp", "1")
    assert [w["message"].split("assume ")[1] for w in d["warnings"]
            if w["code"] == "generated_default"] == [
        "--gpu a100, --tp 1, --precision bf16, --vocab 50257"]
def test_the_benchmark_finds_no_silent_default(capsys):
    from benchmarks.bench_silent_defaults import main as bench

    assert bench([]) == 0
    # ep: in the six dense files (no _EP or _DP_EP row) changes no number
    assert capsys.readouterr().out == ('7 files x 8 keys: 50 warned, 0 refused, 6 unused, '
                                       '0 silent\n')


def test_a_dense_file_without_ep_runs_as_before_and_passes_strict(generated, tmp_path, capsys):
    """No row has an _EP or _DP_EP collective: EP sizes nothing, so its default is no warning
    (nor a reason for --strict to refuse)."""
    cut = tmp_path / "llama-8l.txt"
    cut.write_text(without(Path(generated).read_text(), "ep"))
    rc, d, err = _run(capsys, cut, "--strict", "--param-dtype", "bf16")
    assert (rc, err, d["warnings"]) == (0, "", [])
    rc, stated, _ = _run(capsys, Path(generated), "--param-dtype", "bf16")
    assert d["makespan_ns"] == stated["makespan_ns"] and d["stages"] == stated["stages"]


def test_expert_parallel_rows_without_ep_still_warn(tmp_path, capsys):
    # the MoE file's _EP all-to-alls: priced on a group of one
    path = REPO / "workloads" / "generated" / "mixtral-8x7b-tp2-pp4-ep8-ga8-h200-aicb.txt"
    cut = tmp_path / path.name
    cut.write_text(without(path.read_text(), "ep"))
    rc, d, _ = _run(capsys, cut)
    assert rc == 0 and [w["message"] for w in d["warnings"] if w["code"] == "ep_group_of_one"] \
        == [f"{cut}: rows name expert-parallel collectives (_EP) but ep is absent; they run on "
            "a group of one and cost nothing"]
    # an expert's data-parallel rows alone (_DP_EP, a group of DP / EP): the default sizes them
    text = without((REPO / "workloads" / "gpt-24l.txt").read_text(), "ep")
    row = "embedding\t-1\t27\tALLREDUCE\t8388608\t27\tNONE\t0\t27\tALLREDUCE\t104857600\t0\n"
    assert row in text
    moe = tmp_path / "dp-ep.txt"
    moe.write_text(text.replace(row, row.replace("ALLREDUCE\t104857600", "ALLREDUCE_DP_EP\t"
                                                 "104857600")))
    rc, d, _ = _run(capsys, moe)
    assert rc == 0 and d["warnings"][0] == {
        "code": "ep_defaulted", "message": f"{moe}:1: header has no ep:; using EP 1",
        "option": "ep: in the header"}
    assert main(["run", str(moe), "--strict"]) == 2
    assert capsys.readouterr().err == (f"pipesim: error: --strict: {moe}:1: header has no ep:; "
                                       "using EP 1 (set ep: in the header) [ep_defaulted]\n")
