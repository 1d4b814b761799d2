"""The held-out published runs (benchmarks/data/published-runs-extra.json) and their benchmark:
the data parses and says what its Megatron-LM arguments say, the smallest runs build and run,
and the summary figures are computed as the benchmark's docstring says."""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import pytest

from benchmarks import bench_heldout_runs as heldout
from benchmarks import bench_published_runs

RUNS = heldout.load_runs(heldout.DEFAULT_RUNS)


def test_every_run_has_the_schema_and_a_registered_schedule():
    from simulator.schedules.registry import cost_aware_names, names as registered

    names = set(registered()) | set(cost_aware_names())   # zb-greedy: the fork's own layout
    ids = [r["id"] for r in RUNS]
    assert len(ids) == len(set(ids)) == 87
    for r in RUNS:
        assert r["schedule"] in names, r["id"]
        if r["id"].startswith(heldout.TORCHTITAN):
            # torchtitan's FSDP2 table: a job TOML (checked below), tokens per GPU or OOM
            assert r["source"].startswith("pytorch/torchtitan docs/performance.md"), r["id"]
            assert r["torchtitan_job"] and not r["megatron_args"]
            assert (r["measured"].get("tokens_per_gpu_s", 0) > 0
                    or r["measured"] == {"out_of_memory": True}), r["id"]
            continue
        assert (r["source"].startswith("Qi et al.") and "2401.10241" in r["source"]
                or r["source"].startswith("NVIDIA Megatron-Bridge")
                or r["source"].startswith("NVIDIA Megatron-LM README")), r["id"]
        assert r["gpus"] == r["tp"] * r["pp"] * r.get("cp", 1) * r["dp"]
        if r.get("not_expressible"):
            # 28.3B interleaved one layer a chunk (64 chunks for 62 layers); H100 in FP8
            assert (r["id"].startswith("zb-tab4-28.3B-") and r["schedule"] == "interleaved-1f1b"
                    or r["precision"] == "fp8"), r["id"]
            continue
        if r["id"].startswith("nemo-"):
            # Megatron-Bridge's FP8 runs: tokens per GPU and second, in their recipe's FP8 and
            # bf16 gradient reduction (its performance scripts')
            assert r["measured"]["tokens_per_gpu_s"] > 0 and r["precision"] == "fp8"
            assert r["fp8_recipe"] == "tensorwise" and "--fp8-recipe tensorwise" in \
                r["megatron_args"] and "--grad-reduce-in-bf16" in r["megatron_args"]
            continue
        assert sum(r["stage_layers"]) == r["layers"]
        assert len(r["stage_layers"]) == r["pp"] * r["vpp"]
        if r["id"].startswith("mcore-h100-"):
            # Megatron-Core's H100 weak scaling: TFLOP/s per GPU by Megatron's own formula
            assert r["measured"]["model_tflops_per_gpu"] > 0 and r["flops_formula"] == "megatron"
            continue
        assert r["measured"]["samples_per_gpu_s"] > 0 and r["measured"]["peak_memory_gb"] > 0
    # Table 4: 4 models x 3 microbatch counts x 4 schedules; Table 12: 9 settings x 2; the
    # README's table: 9 models
    assert sum(r["id"].startswith("zb-tab4-") for r in RUNS) == 48
    assert sum(r["id"].startswith("zb-tab12-") for r in RUNS) == 18
    assert sum(r["id"].startswith("mcore-h100-") for r in RUNS) == 9
    assert sum(r["id"].startswith(heldout.TORCHTITAN) for r in RUNS) == 10
    assert [r["id"] for r in RUNS if r.get("cp", 1) > 1] == ["nemo-h100-llama31-405b-fp8"]
    assert sum(bool(r.get("not_expressible")) for r in RUNS) == 0


def test_the_torchtitan_jobs_say_what_the_fields_say(tmp_path):
    """Each torchtitan run's job (with its shape flags) reads to the run's shape, batch and
    activation checkpointing, as `pipesim run --torchtitan` reads it."""
    from simulator.cli.model_inputs import resolve

    flags = {"--model": "arch", "--layers": "layers", "--hidden": "hidden", "--heads": "heads",
             "--kv-heads": "kv_heads", "--ffn": "ffn", "--vocab": "vocab"}
    ac = {"none": "none", "full": "full", "selective": "full"}
    for r in (r for r in RUNS if r["id"].startswith(heldout.TORCHTITAN)):
        job = tmp_path / f"{r['id']}.toml"
        job.write_text(r["torchtitan_job"])
        sf = r["shape_flags"]
        values = {flags[k]: (v if k == "--model" else int(v)) for k, v in zip(sf[::2], sf[1::2])}
        mi = resolve({"torchtitan": str(job), **values}, gpus=r["gpus"])
        s, la = mi.shape, mi.launch
        assert (s.layers, s.hidden, s.heads, s.kv_heads or s.heads, s.ffn, s.vocab) == (
            r["layers"], r["hidden"], r["heads"], r["kv_heads"], r["ffn"], r["vocab"]), r["id"]
        assert (la.seq, la.micro_batch, la.global_batch, la.dp, la.fsdp) == (
            r["seq"], r["micro_batch"], r["global_batch"], 64, 64), r["id"]
        # selective layer AC is full recompute of every second block; op AC its own kind
        assert la.recompute == ac[r["recompute"]] or r["variant"] == "selective op", r["id"]


def test_megatron_args_say_what_the_fields_say():
    from simulator.errors import ConfigError
    from simulator.workload.inputs.megatron_args import megatron_input
    from simulator.workload.stage_layers import megatron_chunk_layers

    for r in RUNS:
        if r["precision"] == "fp8" or not r["megatron_args"]:
            continue    # FP8: not run; a torchtitan job: its own test below
        mi = megatron_input(r["megatron_args"], r["id"], r["gpus"])
        if r["schedule"] == "interleaved-1f1b" and r["id"].startswith("zb-"):
            # one layer a virtual stage, as the source ran it, the embedding and the loss
            # counted as layers: the first and the last chunk hold no transformer layer
            assert mi.launch.vpp == r["vpp"] == (r["layers"] + 2) // r["pp"], r["id"]
            assert megatron_chunk_layers(r["layers"], r["pp"], r["vpp"], None, None, True,
                                         True) == tuple(r["stage_layers"]), r["id"]
            continue
        s, la = mi.shape, mi.launch
        assert (s.layers, s.hidden, s.heads, s.ffn, s.vocab) == (
            r["layers"], r["hidden"], r["heads"], r["ffn"], r["vocab"]), r["id"]
        assert (la.seq, la.micro_batch, la.global_batch, la.tp, la.pp, la.dp, la.precision) == (
            r["seq"], r["micro_batch"], r["global_batch"], r["tp"], r["pp"], r["dp"],
            r["precision"]), r["id"]
        assert la.microbatches == r["global_batch"] // (r["micro_batch"] * r["dp"])
        if r["id"].startswith("mcore-h100-"):
            # an even split, Megatron's own: no first / last stage flags
            assert megatron_chunk_layers(r["layers"], r["pp"], 1) == tuple(r["stage_layers"])
            assert (la.use_distributed_optimizer, la.overlap_grad_reduce,
                    la.overlap_param_gather, la.tp_comm_overlap) == (
                True, True, True, r["tp"] > 1), r["id"]
            continue
        if "--allow-padding-num-layers" in r["megatron_args"]:
            # the zero-bubble fork's own padding, as the authors' script launches every run
            assert la.stage_layers == tuple(r["stage_layers"]), r["id"]
        else:
            assert (la.decoder_first_pipeline_num_layers,
                    la.decoder_last_pipeline_num_layers) == (
                r["stage_layers"][0], r["stage_layers"][-1]), r["id"]
        if r["id"].startswith("zb-"):   # the source's schedule from its launch
            assert la.schedule == r["schedule"], r["id"]
            if r["schedule"] == "zb-greedy":   # ZB-1p / ZB-2p: p or 2p pending backwards
                factor = {"ZB-1p": 1, "ZB-2p": 2}[r["published_schedule"]]
                assert la.zero_bubble_max_pending == factor * r["pp"], r["id"]
                assert bench_published_runs.schedule_option_args(r) == (
                    "-O", f"max_pending={factor * r['pp']}")


def test_the_zero_bubble_models_names_are_their_parameters_with_a_32000_vocabulary():
    # 12 h^2 l (the layers) + V h (one tied embedding), in billions to the name's precision:
    # 32,000 tokens gives every name; 51,200 would be 14.7B and 28.4B
    def billions(r, vocab):
        return (12 * r["hidden"] ** 2 * r["layers"] + vocab * r["hidden"]) / 1e9

    zb = [r for r in RUNS if r["id"].startswith("zb-")]
    assert zb and all(r["vocab"] == 32000 for r in zb)
    for r in zb:
        name = r["id"].split("-")[2]
        assert f"{billions(r, 32000):.{len(name.split('.')[1]) - 1}f}B" == name, r["id"]
        assert "--vocab-size 32000" in r["megatron_args"]
    assert {f"{billions(r, 51200):.1f}B" for r in zb} == {"1.5B", "6.2B", "14.7B", "28.4B"}


def test_one_layer_fewer_on_the_first_and_last_stage():
    by_id = {r["id"]: r for r in RUNS}
    assert by_id["zb-tab4-1.5B-m24-1f1b"]["stage_layers"] == [2, 3, 3, 3, 3, 3, 3, 2]
    assert by_id["zb-tab4-28.3B-m96-zb-1p"]["stage_layers"] == [1] + [2] * 30 + [1]
    # interleaved: one layer a chunk, the first chunk the embedding alone, the last the head
    assert by_id["zb-tab4-1.5B-m24-1f1b-i"]["stage_layers"] == [0] + [1] * 22 + [0]


def test_a_bad_split_is_refused_in_one_line(tmp_path):
    doc = json.loads(heldout.DEFAULT_RUNS.read_text())
    doc["runs"] = [dict(doc["runs"][0], stage_layers=[3] * 8)]
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(doc))
    assert heldout.main(["--runs", str(bad), "--no-shares"]) == 2
    missing = dict(doc["runs"][0])
    del missing["measured"]
    doc["runs"] = [missing]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"run 0 \(zb-tab4-1.5B-m24-1f1b\): no field 'measured'"):
        heldout.load_runs(bad)


def test_the_smallest_runs_build_and_run():
    by_id = {r["id"]: r for r in RUNS}
    picked = [by_id[i] for i in ("zb-tab12-1.5B-m2-1f1b", "zb-tab12-1.5B-m2-zb-2p",
                                 "zb-tab4-1.5B-m24-zb-2p")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [heldout.predict(r, Path(tmp), shares=False) for r in picked]
    for run, row in zip(picked, rows):
        assert row["exit"] == 0, row
        # samples per GPU per second = global batch / (iteration time x GPUs)
        assert row["predicted_samples_per_gpu_s"] == pytest.approx(
            run["global_batch"] / (row["predicted_time_s"] * run["gpus"]), rel=1e-12)
        assert row["throughput_error"] == pytest.approx(
            row["predicted_samples_per_gpu_s"] / run["measured"]["samples_per_gpu_s"] - 1)
        assert 0 < row["predicted_peak_memory_gb"] < 80
    # zero bubble beats 1F1B at two microbatches on 8 stages, in pipesim as measured
    assert rows[1]["predicted_samples_per_gpu_s"] > rows[0]["predicted_samples_per_gpu_s"]
    # the Table 4 ZB-2p run carries the profiled stage times and the source's bubble rate
    assert set(rows[2]["predicted_stage_ms"]) == {"F", "B+W"}
    assert rows[2]["source_bubble_rate"] == 0.0433
    ms = picked[2]["measured"]["stage_ms"]
    assert rows[2]["stage_bw_error"] == pytest.approx(
        rows[2]["predicted_stage_ms"]["B+W"] / (ms["B"] + ms["W"]) - 1)


def _row(group, schedule, measured, predicted, mem=None, pmem=None):
    r = {"id": f"{group}-{schedule}", "group": group, "schedule": schedule,
         "measured": {"samples_per_gpu_s": measured}, "predicted_samples_per_gpu_s": predicted,
         "throughput_error": predicted / measured - 1}
    if mem is not None:
        r["measured"]["peak_memory_gb"] = mem
        r["predicted_peak_memory_gb"] = pmem
        r["memory_error"] = pmem / mem - 1
    return r


def test_speedups_rankings_and_summary_as_documented():
    rows = [_row("g1", "1F1B", 10.0, 11.0, 30, 33),
            _row("g1", "ZB-1p", 11.0, 12.1, 32, 32),     # +10 points measured, +10 predicted
            _row("g1", "ZB-2p", 12.0, 12.1, 60, 66),     # +20 measured, +10 predicted
            _row("g1", "1F1B-I", 11.0, 10.0),            # ties ZB-1p's measured: not a pair
            _row("g2", "1F1B", 5.0, 5.0),
            _row("g2", "ZB-2p", 6.0, 5.5),
            {"id": "g2-oom", "group": "g2", "schedule": "ZB-1p",
             "measured": {"samples_per_gpu_s": 5.5}, "error_text": "out of memory"}]
    sp = {(s["group"], s["schedule"]): s for s in heldout.speedups(rows)}
    assert sp[("g1", "ZB-1p")]["measured_points"] == pytest.approx(10.0)
    assert sp[("g1", "ZB-1p")]["predicted_points"] == pytest.approx(10.0)
    assert sp[("g1", "ZB-2p")]["difference_points"] == pytest.approx(
        100 * (12.1 / 11.0 - 1) - 20.0)
    assert sp[("g1", "1F1B-I")]["predicted_points"] == pytest.approx(100 * (10 / 11 - 1))
    assert ("g2", "ZB-1p") not in sp
    rk = {g["group"]: g for g in heldout.rankings(rows)}
    # g1: 6 pairs, less the ZB-1p / 1F1B-I tie; 1F1B / 1F1B-I and ZB-1p / ZB-2p wrong
    # (ZB-1p and ZB-2p predict the same 12.1: not "less than", so ordered wrong)
    assert rk["g1"]["pairs"] == 5 and rk["g1"]["ordered"] == 3
    assert rk["g1"]["measured"] == ["ZB-2p", "ZB-1p", "1F1B-I", "1F1B"]
    assert rk["g2"]["as_measured"] and rk["g2"]["pairs"] == 1
    s = heldout.summarize(rows)
    errs = [abs(r["throughput_error"]) for r in rows if "throughput_error" in r]
    assert s["throughput"]["median"] == pytest.approx(statistics.median(errs))
    assert s["throughput"]["worst"] == pytest.approx(max(errs))
    assert s["throughput"]["not_predicted"] == s["throughput"]["out_of_memory"] == 1
    assert s["peak_memory"]["worst"] == pytest.approx(0.1)
    zb = [abs(sp[k]["difference_points"]) for k in sp if k[1].startswith("ZB")]
    assert s["zb_speedup_points"]["median"] == pytest.approx(statistics.median(zb))
    assert s["interleaved_speedup_points"]["runs"] == 1
    assert s["ranked_as_measured"] == {"settings": 2, "as_measured": 1, "pairs": 6,
                                       "pairs_ordered": 4}
    text = heldout.summary_text(s)
    assert "schedules ranked as measured: 1 of 2 settings (4 of 6 pairs)" in text


def test_the_bubble_is_counted_as_the_sources_scheduler_counts_it():
    # own spans busy / (1 - own bubble): 80, 100 and 80 ns; the cost is the largest (100), a
    # stage's wait for its first input not in it; a rank with no work is left out
    ranks = [{"busy_ns": 60, "bubble_ratio_own": 0.25}, {"busy_ns": 90, "bubble_ratio_own": 0.1},
             {"busy_ns": 72, "bubble_ratio_own": 0.1}, {"busy_ns": 0, "bubble_ratio_own": 0.0}]
    data = {"ranks": ranks}
    assert heldout.bubble_as_source(data, ranks[1]) == pytest.approx(0.1)
    assert heldout.bubble_as_source(data, ranks[2]) == pytest.approx(0.28)


def test_the_sources_iterations_against_its_own_model():
    # 4 microbatches of 10 + 10 + 5 ms at the source's 20 % bubble: 0.125 s; measured 0.135 s
    # (4 samples / (4 / 0.27 per GPU per s x 2 GPUs)): 2.5 ms a microbatch beyond its model
    base = {"group": "g", "global_batch": 4, "micro_batch": 1, "dp": 1, "gpus": 2,
            "derived": {"bubble_rate": 0.2}, "schedule": "1f1b", "published_schedule": "1F1B"}
    runs = [base | {"measured": {"samples_per_gpu_s": 4 / 0.27,
                                 "stage_ms": {"F": 10, "B": 10, "W": 5}}},
            base | {"group": "other", "measured": {"samples_per_gpu_s": 1.0}}]
    excess = heldout.source_model_excess(runs)
    assert list(excess) == ["1F1B"] and excess["1F1B"]["runs"] == 1
    assert excess["1F1B"]["median_ms"] == pytest.approx(2.5)


def test_stage_times_of_a_middle_rank():
    run = {"global_batch": 12, "micro_batch": 3, "dp": 1, "pp": 4,
           "measured": {"stage_ms": {"F": 10.0, "B": 8.0, "W": 4.0, "comm": 0.5}}}
    ranks = [{"forward_ns": 0, "backward_ns": 0}] * 2 + [
        {"forward_ns": 36e6, "backward_ns": 60e6}, {"forward_ns": 0, "backward_ns": 0}]
    got = heldout.stage_times(run, {"ranks": ranks})
    # 4 microbatches: 9 ms forward and 15 ms backward on rank 2 (pp // 2)
    assert got["predicted_stage_ms"] == {"F": 9.0, "B+W": 15.0}
    assert got["stage_f_error"] == pytest.approx(-0.1)
    assert got["stage_bw_error"] == pytest.approx(0.25)


def test_megatron_flops_is_megatrons_formula_for_a_gpt_run():
    by_id = {r["id"]: r for r in RUNS}
    r = by_id["mcore-h100-1.7B"]
    # 12 B s l h^2 ((1 + G/A + s/h) q/h + f/h + V/(2 l h)), G = A, q = h, f = 4h: at B 192,
    # s 4096, l 24, h 2048, V 131072 the bracket is 2 + 2 + 4 + 4/3
    assert heldout.megatron_flops(r) == pytest.approx(
        12 * 192 * 4096 * 24 * 2048 ** 2 * (2 + 2 + 4 + 131072 / (2 * 24 * 2048)), rel=1e-12)
    with pytest.raises(ValueError, match="flops_formula megatron"):
        heldout.megatron_flops(by_id["zb-tab4-1.5B-m24-1f1b"])


def test_the_weak_scaling_trend_counts_pairs_and_one_schedule_is_not_ranked():
    rows = [{"id": f"mcore-h100-{n}", "group": f"g{n}", "schedule": "1F1B",
             "measured": {"model_tflops_per_gpu": m}, "predicted_tflops_per_gpu": p,
             "predicted_samples_per_gpu_s": 1.0}
            for n, m, p in (("a", 400, 500), ("b", 410, 300), ("c", 470, 450))]
    # a-b within 3 %: not counted; a-c ordered wrong (500 > 450), b-c right
    assert heldout.size_trend(rows) == {"pairs": 2, "ordered": 1,
                                        "misordered": ["mcore-h100-a / mcore-h100-c"]}
    # a setting of one schedule, measured in TFLOP/s, has nothing to rank or speed up
    assert heldout.rankings(rows) == [] and heldout.speedups(rows) == []


def test_a_what_if_changes_one_constant_on_every_run_and_is_never_the_record(tmp_path, capsys):
    """--set runs every held-out run with a system override: a cost added before each action
    lengthens a 1F1B pipeline of p stages and m microbatches by its critical path's 2p + 2m - 2
    actions (p forwards, the last stage's other 2m - 1, p - 1 backwards) times the cost."""
    run = next(r for r in RUNS if r["id"] == "zb-tab12-1.5B-m2-1f1b")   # p 8, m 2
    assert (run["pp"], run["global_batch"] // run["micro_batch"]) == (8, 2)

    def cost(ns):
        return tuple(a for k in "FBIW" for a in ("--set", f"runtime.action_overhead_ns.{k}={ns}"))

    with tempfile.TemporaryDirectory() as tmp:
        base = heldout.predict(run, Path(tmp), shares=False)
        more = heldout.predict(run, Path(tmp), shares=False, what_if=cost(1_050_000))
    assert more["predicted_time_s"] - base["predicted_time_s"] == pytest.approx(
        (2 * 8 + 2 * 2 - 2) * 1e-3, rel=1e-9)     # 50 us (the preset's) -> 1050 us
    # refused in one line before any run: with the shares, a record the docs would read as
    # the prediction, an unknown key
    assert heldout.main(["--set", "runtime.action_overhead_ns.F=1"]) == 2
    assert capsys.readouterr().err == ("bench_heldout_runs: --set: needs --no-shares (the "
                                       "shares' runs take no what-if)\n")
    record = tmp_path / "2026-01-01-heldout-runs.json"
    assert heldout.main(["--no-shares", "--set", "runtime.action_overhead_ns.F=1",
                         "--record", str(record)]) == 2
    assert capsys.readouterr().err == (
        f"bench_heldout_runs: --record {record}: a what-if (--set) is not the prediction "
        "docs/validation.md reads; name it otherwise, e.g. DATE-heldout-whatif-NAME.json\n")
    assert heldout.main(["--no-shares", "--set", "runtime.nope=1"]) == 2
    assert capsys.readouterr().err == ("bench_heldout_runs: --set: unknown system key "
                                       "'runtime.nope'\n")
    assert not record.exists()
