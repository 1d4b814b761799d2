"""The readers of the files users already have: a Hugging Face config.json (one per family in
../shared/hf-configs), a Megatron-LM argument list (../shared/published-runs/runs.json's
``megatron_args``, and hand-made ones for each rule) and a torchtitan job TOML. Exact records,
exact one-line refusals, and a warning for everything the generator cannot express."""

from __future__ import annotations

import json

import pytest

from simulator.errors import ConfigError
from simulator.workload.inputs.hf_config import read_hf_config
from simulator.workload.inputs.megatron_args import megatron_input
from simulator.workload.inputs.shape import LaunchSettings, ModelShape
from simulator.workload.inputs.torchtitan_job import llama3_flavor, llama3_shape, \
    read_torchtitan_job

# -- Hugging Face ---------------------------------------------------------------------------

HF = {
    "llama-3.1-8b.json": ModelShape("llama", 32, 4096, 32, ffn=14336, vocab=128256, kv_heads=8,
                                    max_positions=131072),
    "mistral-7b-v0.1.json": ModelShape("llama", 32, 4096, 32, ffn=14336, vocab=32000,
                                       kv_heads=8, max_positions=32768),
    "qwen2-1.5b.json": ModelShape("llama", 28, 1536, 12, ffn=8960, vocab=151936, kv_heads=2,
                                  tied_embeddings=True, max_positions=131072),
    "gpt2.json": ModelShape("gpt", 12, 768, 12, ffn=3072, vocab=50257, tied_embeddings=True,
                            max_positions=1024),
    "pythia-1.4b.json": ModelShape("gpt", 24, 2048, 16, ffn=8192, vocab=50304,
                                   max_positions=2048),
    "mixtral-8x22b-v0.1.json": ModelShape("moe", 56, 6144, 48, ffn=16384, vocab=32000,
                                          kv_heads=8, experts=8, topk=2, max_positions=65536),
    "deepseek-moe-16b-base.json": ModelShape("moe", 28, 2048, 16, ffn=1408, vocab=102400,
                                             kv_heads=16, experts=64, topk=6,
                                             max_positions=4096, shared_ffn=2 * 1408),
}
# the keys each family's warnings name (what the generator's model cannot express)
HF_WARNED = {
    "llama-3.1-8b.json": [],
    "mistral-7b-v0.1.json": ["sliding_window"],
    "qwen2-1.5b.json": ["attention_bias", "tie_word_embeddings"],
    "gpt2.json": ["tie_word_embeddings"],
    "pythia-1.4b.json": ["use_parallel_residual", "rotary_pct"],
    "mixtral-8x22b-v0.1.json": [],
    "deepseek-moe-16b-base.json": ["first_k_dense_replace"],
}


@pytest.mark.parametrize("name", sorted(HF))
def test_each_family_reads_to_its_exact_shape(hf_configs_dir, name):
    got = read_hf_config(str(hf_configs_dir / name))
    assert got.shape == HF[name]
    assert got.launch is None
    prefix = f"--hf-config {hf_configs_dir / name}: "
    assert all(w.startswith(prefix) for w in got.warnings)
    assert [w[len(prefix):].split(":")[0] for w in got.warnings] == HF_WARNED[name]


def test_what_deepseek_and_mistral_cannot_be_is_said_in_words(hf_configs_dir):
    ds = read_hf_config(str(hf_configs_dir / "deepseek-moe-16b-base.json"))
    assert ds.warnings[0].endswith("first_k_dense_replace: 1: the first 1 layer(s) are dense "
                                   "(an MLP 10944 wide) in the model; the generator writes "
                                   "every layer with experts")
    mi = read_hf_config(str(hf_configs_dir / "mistral-7b-v0.1.json"))
    assert mi.warnings[0].endswith("sliding_window: 4096: attention is priced over the whole "
                                   "causal sequence; with sequences longer than 4096 tokens "
                                   "the model attends to fewer")
    gpt2 = read_hf_config(str(hf_configs_dir / "gpt2.json"))
    assert gpt2.notes[0].endswith("n_inner null: the MLP is 4 x n_embd = 3072 wide (GPT-2's "
                                  "rule)")


def test_an_unknown_family_is_named_in_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "mamba", "hidden_size": 768}')
    with pytest.raises(ConfigError) as err:
        read_hf_config(str(path))
    assert str(err.value) == (
        f"--hf-config {path}: model_type 'mamba': pipesim reads the llama, mistral, qwen2, "
        "qwen3, gpt2, gpt_neox, mixtral, qwen2_moe, qwen3_moe, deepseek, deepseek_v2 and "
        "deepseek_v3 families")
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"expected a JSON object \(a model's config.json\), "
                                          "found list$"):
        read_hf_config(str(path))
    path.write_text('{"model_type": "llama",')
    with pytest.raises(ConfigError, match=r"config.json:1:\d+: expected JSON"):
        read_hf_config(str(path))


def test_a_missing_or_bad_key_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, '
                    '"num_attention_heads": "32", "vocab_size": 32000, "intermediate_size": 1}')
    with pytest.raises(ConfigError) as err:
        read_hf_config(str(path))
    assert str(err.value) == (f"--hf-config {path}: num_attention_heads: expected a positive "
                              "integer (the llama family's num_attention_heads), found '32'")
    path.write_text('{"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, '
                    '"num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128}')
    with pytest.raises(ConfigError) as err:
        read_hf_config(str(path))
    assert str(err.value) == (f"--hf-config {path}: num_local_experts: expected a positive "
                              "integer (the mixtral family's num_local_experts), found nothing")


@pytest.mark.parametrize("family, key, value", [("mistral", "max_position_embeddings", "{}"),
                                                ("llama", "max_position_embeddings", "[]"),
                                                ("gpt2", "n_positions", '"1024"')])
def test_a_bad_longest_sequence_is_named(tmp_path, family, key, value):
    # the longest sequence a config was built for, compared with --seq later, is a size too
    path = tmp_path / "config.json"
    shape = ('"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100' if family == "gpt2"
             else '"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
                  '"vocab_size": 100, "intermediate_size": 128')
    path.write_text(f'{{"model_type": "{family}", {shape}, "{key}": {value}}}')
    with pytest.raises(ConfigError) as err:
        read_hf_config(str(path))
    assert str(err.value) == (f"--hf-config {path}: {key}: expected a positive integer (the "
                              f"{family} family's {key}), found {json.loads(value)!r}")


# -- Megatron-LM ----------------------------------------------------------------------------

def test_every_published_run_reads_to_its_stated_configuration(published_runs):
    """runs.json states each run twice: as fields and as Megatron-LM's arguments; reading the
    arguments gives the fields."""
    assert len(published_runs) == 18
    for run in published_runs:
        got = megatron_input(run["megatron_args"], run["id"], run["gpus"])
        s, la = got.shape, got.launch
        assert (s.arch, s.layers, s.hidden, s.heads, s.ffn, s.vocab) == (
            "gpt", run["layers"], run["hidden"], run["heads"], run["ffn"], run["vocab"]), run["id"]
        assert (la.tp, la.pp, la.dp, la.vpp, la.seq, la.micro_batch, la.global_batch) == (
            run["tp"], run["pp"], run["dp"], run["vpp"], run["seq"], run["micro_batch"],
            run["global_batch"]), run["id"]
        assert la.microbatches == run["global_batch"] // (run["micro_batch"] * run["dp"])
        assert la.precision == run["precision"] and la.recompute_granularity == run["recompute"]
        assert la.sequence_parallel == run["sequence_parallel"]
        assert la.flash_attention == run["flash_attention"]
        assert la.schedule == ("interleaved-1f1b" if run["vpp"] > 1 else "1f1b")
        assert la.recompute == ("full" if run["recompute"] == "full" else "none")


def test_one_published_run_as_its_exact_records(published_runs):
    run = next(r for r in published_runs if r["id"] == "kort-tab5-175B-seqsel")
    got = megatron_input(run["megatron_args"], "runs.json", run["gpus"])
    assert got.shape == ModelShape("gpt", 96, 12288, 96, ffn=49152, vocab=51200, kv_heads=None,
                                   tied_embeddings=True, max_positions=2048)
    src = "--megatron-args runs.json"
    assert got.launch == LaunchSettings(
        source=src, tp=8, pp=8, vpp=3, dp=1, seq=2048, micro_batch=1, global_batch=64,
        microbatches=64, gpus=64, sequence_parallel=True, precision="fp16",
        flash_attention=False, recompute="none", recompute_granularity="selective",
        schedule="interleaved-1f1b", grad_reduce_dtype="fp16",   # --fp16: Megatron's default
        fp16_loss_scale=True,                                   # and its loss scaler
        rank_order="tp-dp-pp")                                  # Megatron's default order
    assert got.warnings == (
        f"{src}: --untie-embeddings-and-output-weights absent: the LM head shares the "
        "embedding's weights (Megatron-LM's default); pipesim counts them apart, as the last "
        "stage's copy at pp > 1",
        f"{src}: neither --use-flash-attn nor --attention-backend: the attention keeps its "
        "scores (unfused, as Megatron-LM before Transformer Engine); current Megatron-LM's "
        "default backend (auto) picks a fused kernel that keeps none")
    assert got.notes == (f"{src}: 3 virtual stage(s) per rank (12 layers per stage / 4)",)


BASE = ("--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
        "--micro-batch-size 2 --vocab-size 50304 --untie-embeddings-and-output-weights --bf16 "
        "--use-flash-attn ")


def test_defaults_are_megatrons_and_said(tmp_path):
    got = megatron_input(BASE + "--swiglu --normalization RMSNorm --disable-bias-linear "
                         "--group-query-attention --num-query-groups 4", "a.txt", 8)
    assert got.shape == ModelShape("llama", 24, 1024, 16, ffn=2688, vocab=50304, kv_heads=4)
    la = got.launch
    assert (la.tp, la.pp, la.dp, la.global_batch, la.microbatches) == (1, 1, 8, 16, 1)
    assert got.notes == ("--megatron-args a.txt: --ffn-hidden-size 2688 (Megatron-LM's default: "
                         "int(4h x 2/3 / 64) x 64 with --swiglu)",
                         "--megatron-args a.txt: --global-batch-size 16 (Megatron-LM's "
                         "default: --micro-batch-size x dp)")
    # Megatron-LM's dropouts default to 0.1; the llama layer is priced without them
    assert got.warnings == tuple(
        f"--megatron-args a.txt: {flag} 0.1 (Megatron-LM's default): the llama model is priced "
        "without dropout (no kernels, no masks)"
        for flag in ("--attention-dropout", "--hidden-dropout"))
    plain = megatron_input(BASE, "b.txt", 8)
    assert plain.shape.ffn == 4096 and plain.shape.arch == "gpt"


def test_one_shell_line_or_one_per_line_with_comments_reads_the_same():
    one = megatron_input(BASE + "--pipeline-model-parallel-size 4 --global-batch-size 32",
                         "a", 8)
    lines = "# written by hand\n" + "\n".join(
        f"--{w}" for w in (BASE + "--pipeline-model-parallel-size 4 --global-batch-size=32")
        .split("--")[1:]) + "\n# end\n"
    other = megatron_input(lines, "a", 8)
    assert one == other
    assert other.launch.microbatches == 8 and other.launch.dp == 2


def test_unmodelled_flags_are_warned_never_dropped():
    got = megatron_input(BASE + "--use-distributed-optimizer --overlap-grad-reduce "
                         "--overlap-param-gather --lr 1.5e-4 --weight-decay 0.1 "
                         "--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap "
                         "--tokenizer-type GPT2BPETokenizer --qk-layernorm --clip-grad 1.0",
                         "a.txt", 8)
    la = got.launch
    assert (la.use_distributed_optimizer, la.overlap_grad_reduce, la.overlap_param_gather,
            la.tp_comm_overlap) == (True, True, True, True)
    src = "--megatron-args a.txt"
    assert got.warnings == (f"{src}: --qk-layernorm: not modelled by pipesim (ignored)",)
    # what changes nothing of an iteration's time or memory is named in a note: --strict does
    # not refuse a launch for its learning rate
    assert got.notes[-1] == (f"{src}: read, no effect on an iteration's time or memory: --lr, "
                             "--weight-decay, --tokenizer-type, --clip-grad")


def test_the_llama3_examples_bookkeeping_flags_are_a_note_and_a_batch_ramp_names_its_batch():
    """Flags of Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh that change nothing
    of an iteration (the tokenizer, the profiler's window, the checkpoint format, FP8's scaling
    history) do not make --strict refuse it; a batch ramp says which batch the run times."""
    got = megatron_input(BASE + "--tiktoken-pattern v2 --no-mmap-bin-files --profile "
                         "--profile-step-start 4 --profile-step-end 6 --ckpt-format torch_dist "
                         "--logging-level 20 --global-batch-size 64 --rampup-batch-size 16 16 5859375",
                         "a.txt", 8)
    src = "--megatron-args a.txt"
    assert got.warnings == (f"{src}: --rampup-batch-size: the global batch changes over the "
                            "run; pipesim times an iteration at --global-batch-size 64 (4 "
                            "microbatches)",)
    assert got.notes[-1] == (f"{src}: read, no effect on an iteration's time or memory: "
                             "--tiktoken-pattern, --no-mmap-bin-files, --profile, "
                             "--profile-step-start, --profile-step-end, --ckpt-format, "
                             "--logging-level")


def test_a_moe_launch_says_which_dispatcher_and_expert_gemms_it_is_priced_with():
    """The moe rows price the alltoall dispatcher and one batched GEMM per projection of a
    rank's experts; Megatron-LM's defaults are allgather and SequentialMLP, so a launch
    without the flags is warned (examples/mixtral/train_mixtral_8x7b_distributed.sh gives
    both), and on a dense model they are ignored as Megatron-LM ignores them."""
    moe = BASE + "--num-experts 8 --moe-router-topk 2 --swiglu "
    src = "--megatron-args a.txt"
    bare = megatron_input(moe, "a.txt", 8)
    assert [w for w in bare.warnings if "--moe" in w] == [
        f"{src}: --moe-token-dispatcher-type absent: Megatron-LM's default allgather; pipesim "
        "prices the alltoall dispatcher's all-to-all over the expert-parallel group",
        f"{src}: --moe-grouped-gemm absent: Megatron-LM runs the rank's experts one after "
        "another (SequentialMLP); pipesim prices each projection of them as one batched GEMM"]
    given = megatron_input(moe + "--moe-token-dispatcher-type alltoall --moe-grouped-gemm",
                           "a.txt", 8)
    assert not [w for w in given.warnings if "--moe" in w]
    assert [n for n in given.notes if "as priced" in n] == [
        f"{src}: --moe-token-dispatcher-type alltoall: the tokens dispatched and combined by "
        "all-to-all over the expert-parallel group, as priced",
        f"{src}: --moe-grouped-gemm: each projection of the rank's experts one grouped GEMM, "
        "as priced"]
    flex = megatron_input(moe + "--moe-token-dispatcher-type flex --moe-grouped-gemm",
                          "a.txt", 8)
    assert f"{src}: --moe-token-dispatcher-type flex; pipesim prices the alltoall " \
           "dispatcher's all-to-all over the expert-parallel group" in flex.warnings
    dense = megatron_input(BASE + "--moe-grouped-gemm", "a.txt", 8)
    assert dense.warnings == (f"{src}: --moe-grouped-gemm: ignored without --num-experts (a "
                              "dense model)",)


@pytest.mark.parametrize("flags, warning", [
    ("--recompute-granularity selective --recompute-modules mlp",
     "--recompute-modules mlp: not modelled; pipesim's selective recompute re-runs the attention "
     "core alone (core_attn, Megatron-LM's default)"),
    ("--recompute-granularity selective --recompute-modules core_attn mlp --bf16",
     "--recompute-modules core_attn mlp: not modelled; pipesim's selective recompute re-runs "
     "the attention core alone (core_attn, Megatron-LM's default)"),
    ("--recompute-modules mlp", "--recompute-modules: ignored without --recompute-granularity "
     "selective (as Megatron-LM does)"),
])
def test_recompute_modules_other_than_the_attention_core_are_named(flags, warning):
    """examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh recomputes the MLP
    (--recompute-modules mlp); pipesim's selective recompute is Megatron-LM's default, the
    attention core."""
    got = megatron_input(BASE + flags, "a.txt", 8)
    assert f"--megatron-args a.txt: {warning}" in got.warnings
    default = megatron_input(BASE + "--recompute-granularity selective --recompute-modules "
                             "core_attn", "a.txt", 8)
    assert not [w for w in default.warnings if "recompute" in w]
    with pytest.raises(ConfigError) as err:
        megatron_input(BASE + "--recompute-granularity selective --recompute-modules attn",
                       "a.txt", 8)
    assert str(err.value).startswith("--megatron-args a.txt: --recompute-modules: expected "
                                     "modules of core_attn, gdn_norm_out, ")
    assert str(err.value).endswith(" (Megatron-LM's TransformerConfig refuses others), found attn")


def test_no_position_embedding_is_nothing_with_rope_and_refused_without_it():
    """Megatron-LM's validate_args: --no-position-embedding (deprecated) only with RoPE, as
    examples/mixtral/train_mixtral_8x7b_distributed.sh gives it."""
    got = megatron_input(BASE + "--position-embedding-type rope --no-position-embedding",
                         "a.txt", 8)
    assert "--no-position-embedding" in got.notes[-1] and not any(
        "--no-position-embedding" in w for w in got.warnings)
    with pytest.raises(ConfigError) as err:
        megatron_input(BASE + "--no-position-embedding", "a.txt", 8)
    assert str(err.value) == (
        "--megatron-args a.txt: --no-position-embedding: expected --position-embedding-type "
        "rope with it (Megatron-LM refuses it otherwise: deprecated, use "
        "--position-embedding-type), found learned_absolute (the default)")


@pytest.mark.parametrize("flags, warning", [
    ("--clip-grad 0", "--clip-grad 0: Megatron-LM skips the gradients' norm; pipesim's "
     "optimizer step still prices its pass over them"),
    ("--kv-channels 128", "--kv-channels 128: heads of 128 channels are not expressible; "
     "priced as --hidden-size / --num-attention-heads = 64"),
    ("--attention-dropout 0.0", "--attention-dropout 0: the gpt model is priced with dropout "
     "0.1 (its kernels and masks)"),
])
def test_a_value_pipesim_does_not_price_is_warned(flags, warning):
    got = megatron_input(BASE + flags, "a.txt", 8)
    assert got.warnings == (f"--megatron-args a.txt: {warning}",)


def test_megatron_ddp_flags_map_onto_the_run_options():
    from simulator.cli.model_inputs import launch_options
    from simulator.run_options import RunOptions
    from simulator.workload.inputs.shape import ModelInput

    def run_opts(flags: str) -> RunOptions:
        got = megatron_input(BASE.replace("--bf16 ", "") + flags, "a.txt", 8)
        mi = ModelInput(got.source, got.shape, got.launch, got.warnings, got.notes)
        return launch_options(RunOptions(), mi, None)[0]

    o = run_opts("--bf16 --use-distributed-optimizer --overlap-grad-reduce "
                 "--overlap-param-gather --tp-comm-overlap --ddp-bucket-size 1000000 "
                 "--tensor-model-parallel-size 2 --sequence-parallel")
    assert (o.megatron_ddp, o.use_distributed_optimizer, o.overlap_grad_reduce,
            o.overlap_param_gather, o.tp_comm_overlap, o.ddp_bucket_size,
            o.grad_reduce_dtype) == (True, True, True, True, True, 1000000, "fp32")
    # Megatron's defaults: its DDP, blocking, fp32 reduction with --bf16
    o = run_opts("--bf16")
    assert (o.megatron_ddp, o.overlap_grad_reduce, o.use_distributed_optimizer,
            o.grad_reduce_dtype) == (True, False, False, "fp32")
    assert run_opts("--bf16 --grad-reduce-in-bf16").grad_reduce_dtype == "bf16"
    assert run_opts("--fp16").grad_reduce_dtype == "fp16"
    assert run_opts("--fp16 --accumulate-allreduce-grads-in-fp32").grad_reduce_dtype == "fp32"
    # --fp16 runs the loss scaler: its step unscales and checks every main gradient (8 B more)
    assert (run_opts("--fp16").fp16_loss_scale, run_opts("--bf16").fp16_loss_scale) == (
        True, False)
    assert run_opts("--fp16").ddp_settings().step_bytes_per_param == 38 + 8
    # the zero-bubble fork's post-validation: no barrier before the step (with zero bubble)
    zb = ("--fp16 --pipeline-model-parallel-size 2 --enable-zero-bubble "
          "--zero-bubble-max-pending-backward 2 ")
    assert run_opts(zb + "--enable-optimizer-post-validation").ddp_settings().post_validation
    assert not run_opts(zb).ddp_settings().post_validation
    assert run_opts("--bf16").ddp_settings().step_bytes_per_param == 38
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --overlap-param-gather: "
                                          r"expected --use-distributed-optimizer with it"):
        megatron_input(BASE + "--bf16 --overlap-param-gather", "a.txt", 8)


def test_no_overlap_p2p_communication_batches_an_interleaved_schedules_exchanges():
    from simulator.cli.model_inputs import launch_options
    from simulator.run_options import RunOptions
    from simulator.workload.inputs.shape import ModelInput

    def launched(flags: str, opts: RunOptions = RunOptions()):
        got = megatron_input(BASE + flags, "a.txt", 8)
        mi = ModelInput(got.source, got.shape, got.launch, got.warnings, got.notes)
        return got, launch_options(opts, mi, None)[0]

    inter = ("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 "
             "--global-batch-size 16 ")
    got, o = launched(inter + "--no-overlap-p2p-communication")
    assert (got.launch.p2p, o.p2p) == ("batched", "batched")
    assert ("--megatron-args a.txt: --no-overlap-p2p-communication: the interleaved "
            "schedule's exchanges batched, as Megatron-LM runs them without the overlap "
            "(--p2p batched)") in got.notes
    assert not any("overlap-p2p" in w for w in got.warnings)
    # Megatron's default overlaps them: the run keeps its own --p2p (the system's)
    assert launched(inter)[1].p2p is None
    # the command line's --p2p wins
    assert launched(inter + "--no-overlap-p2p-communication", RunOptions(p2p="async"))[1].p2p \
        == "async"
    # without virtual stages there is no overlap to turn off
    got, o = launched("--no-overlap-p2p-communication")
    assert (got.launch.p2p, o.p2p) == (None, None)
    assert any("no effect without virtual stages" in n for n in got.notes)


def test_placement_flags_are_carried():
    got = megatron_input(BASE + "--pipeline-model-parallel-size 4 "
                         "--decoder-first-pipeline-num-layers 5 "
                         "--decoder-last-pipeline-num-layers 7 --global-batch-size 16", "a", 8)
    la = got.launch
    assert (la.decoder_first_pipeline_num_layers, la.decoder_last_pipeline_num_layers) == (5, 7)
    emb = megatron_input(BASE + "--pipeline-model-parallel-size 2 "
                         "--account-for-embedding-in-pipeline-split "
                         "--account-for-loss-in-pipeline-split", "a", 2)
    assert emb.launch.account_for_embedding_in_pipeline_split
    assert emb.launch.account_for_loss_in_pipeline_split
    layout = megatron_input(BASE + "--pipeline-model-parallel-size 2 "
                            "--pipeline-model-parallel-layout E,t*5|t*7|t*7|t*5,L", "a", 2)
    assert layout.launch.stage_layers == (5, 7, 7, 5) and layout.launch.vpp == 2


REFUSALS = [
    ("--fp16", "--megatron-args f.txt: --bf16: expected not together with --fp16 (one "
               "precision), found both"),
    ("--global-batch-size 30", "--megatron-args f.txt: --global-batch-size: expected a multiple "
                               "of --micro-batch-size 2 x dp 8 = 16, found 30"),
    ("--pipeline-model-parallel-size 5", "--megatron-args f.txt: --gpus 8: expected a multiple "
                                         "of --tensor-model-parallel-size 1 x "
                                         "--pipeline-model-parallel-size 5"),
    ("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 1 --num-attention-heads 12 "
     "--hidden-size 1020",
     "--megatron-args f.txt: --num-attention-heads: given twice (16 and 12); expected one "
     "value"),
    ("--tensor-model-parallel-size 8 --num-attention-heads 16 --hidden-size 1024 "
     "--pipeline-model-parallel-size 1 --group-query-attention --num-query-groups 3",
     "--megatron-args f.txt: --num-query-groups: expected a divisor of --num-attention-heads "
     "16, found 3"),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 5",
     "--megatron-args f.txt: --num-layers-per-virtual-pipeline-stage: expected a divisor of the "
     "12 layers per pipeline stage, found 5"),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3 "
     "--num-virtual-stages-per-pipeline-rank 4",
     "--megatron-args f.txt: --num-virtual-stages-per-pipeline-rank: expected not together "
     "with --num-layers-per-virtual-pipeline-stage (Megatron-LM takes one), found 4"),
    ("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 5 "
     "--account-for-loss-in-pipeline-split",
     "--megatron-args f.txt: --decoder-first-pipeline-num-layers: expected not together with "
     "--account-for-embedding/loss-in-pipeline-split (Megatron-LM takes one), found 5"),
    ("--pipeline-model-parallel-size 8 --account-for-embedding-in-pipeline-split",
     "--megatron-args f.txt: --num-layers: expected layers + embedding divisible by "
     "--pipeline-model-parallel-size 8, found 24"),
    ("--recompute-granularity full", "--megatron-args f.txt: --recompute-method: expected "
     "uniform or block with --recompute-granularity full (Megatron-LM's rule), found none"),
    ("--recompute-granularity selective --recompute-method uniform",
     "--megatron-args f.txt: --recompute-method: expected none with --recompute-granularity "
     "selective (Megatron-LM's rule), found uniform"),
    ("--recompute-granularity half", "--megatron-args f.txt: --recompute-granularity: expected "
     "one of full, selective, found 'half'"),
    ("--tp-comm-overlap", "--megatron-args f.txt: --tp-comm-overlap: expected "
     "--sequence-parallel with it (Megatron-LM's rule), found no sequence parallelism"),
    ("--overlap-param-gather", "--megatron-args f.txt: --overlap-param-gather: expected "
     "--use-distributed-optimizer with it (Megatron-LM's rule), found none"),
    ("--num-experts 8 --expert-model-parallel-size 3", "--megatron-args f.txt: --num-experts: "
     "expected a multiple of --expert-model-parallel-size 3, found 8"),
    ("--micro-batch-size two", "--megatron-args f.txt: --micro-batch-size: expected an "
                               "integer, found 'two'"),
    ("--pipeline-model-parallel-size", "--megatron-args f.txt: --pipeline-model-parallel-size: "
                                       "expected a value, found none"),
    ("--max-position-embeddings 512", "--megatron-args f.txt: --max-position-embeddings: "
                                      "expected at least --seq-length 1024, found 512"),
]


@pytest.mark.parametrize("extra,line", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_what_megatron_refuses_is_refused_in_one_line(extra, line):
    with pytest.raises(ConfigError) as err:
        megatron_input(BASE + extra, "f.txt", 8)
    assert str(err.value) == line


def test_a_missing_required_flag_and_a_launcher_word_are_refused():
    with pytest.raises(ConfigError) as err:
        megatron_input("--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                       "--micro-batch-size 1", "f.txt", 1)
    assert str(err.value) == ("--megatron-args f.txt: --seq-length: expected the sequence "
                              "length (Megatron-LM requires it), found none")
    with pytest.raises(ConfigError) as err:
        megatron_input("python pretrain_gpt.py " + BASE, "f.txt", 1)
    assert str(err.value) == ("--megatron-args f.txt: 'python': expected a --flag (Megatron-LM's "
                              "arguments, one shell line or one per line)")


# -- torchtitan -----------------------------------------------------------------------------

def test_llama3_flavors_are_torchtitans_numbers():
    # dim, layers, heads, kv heads; FFN by torchtitan's FeedForward rule
    assert llama3_shape("8B") == ModelShape("llama", 32, 4096, 32, ffn=14336, vocab=128256,
                                            kv_heads=8, max_positions=131072)
    assert llama3_shape("70B")[:7] == ("llama", 80, 8192, 64, 28672, 128256, 8)
    assert llama3_shape("405B")[:7] == ("llama", 126, 16384, 128, 53248, 128256, 8)
    assert llama3_flavor(llama3_shape("70B")._replace(max_positions=None)) == "70B"
    assert llama3_flavor(llama3_shape("70B")._replace(layers=79)) is None


TOML = """
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 16
seq_len = 8192
global_batch_size = 64

[parallelism]
tensor_parallel_degree = 8
pipeline_parallel_degree = 4
data_parallel_shard_degree = 2
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 2

[activation_checkpoint]
mode = "full"
"""


def test_a_torchtitan_job_reads_to_its_launch(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(TOML)
    got = read_torchtitan_job(str(path), gpus=64)
    assert got.shape == llama3_shape("8B")
    src = f"--torchtitan {path}"
    # 2 stages per rank (multi-stage default), torchtitan's split of 32 layers + 1 + 1 over 8
    assert got.launch == LaunchSettings(
        source=src, tp=8, pp=4, vpp=2, dp=2, seq=8192, micro_batch=2, global_batch=64,
        microbatches=8, gpus=64, sequence_parallel=True, precision="bf16",
        flash_attention=True, recompute="full", recompute_granularity="full",
        schedule="interleaved-1f1b", stage_layers=(4, 5, 4, 4, 4, 4, 4, 3), fsdp=2,
        runtime="torchtitan")
    assert got.warnings == (f"{src}: [training] global_batch_size 64: 2 gradient-accumulation "
                            "steps, each a pipeline step of its own; pipesim simulates one",
                            f"{src}: [parallelism] data_parallel_shard_degree 2: FSDP (--fsdp "
                            "2) reduce-scatters in Megatron's buckets, not per transformer "
                            "block; without a pipeline each microbatch gathers every layer "
                            "before its forward, and before its backward with "
                            "reshard_after_forward (torchtitan's default there), with one the "
                            "weights are gathered behind the first forward; the gathers and "
                            "the reduce-scatters are priced as if each had the link alone")[::-1]


def test_torchtitans_compile_and_float8_sections_are_inert_until_turned_on(tmp_path):
    """torchtitan's own llama3 presets carry [compile] enable = false and a [float8] section
    with no float8 converter: nothing to warn of (--strict runs them); a converter, or compile
    turned on, is named."""
    path = tmp_path / "job.toml"
    inert = ('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 8\n'
             'seq_len = 2048\n[compile]\nenable = false\ncomponents = ["model", "loss"]\n'
             '[float8]\nenable_fsdp_float8_all_gather = false\nfilter_fqns = ["output"]\n')
    path.write_text(inert)

    def warned(job):   # less the FSDP pricing's warning, which every sharded job has
        return tuple(w for w in job.warnings if "FSDP" not in w)
    assert warned(read_torchtitan_job(str(path), gpus=8)) == ()
    path.write_text(inert.replace('flavor = "8B"', 'flavor = "8B"\nconverters = ["float8"]')
                    .replace("enable = false", "enable = true"))
    src = f"--torchtitan {path}"
    assert warned(read_torchtitan_job(str(path), gpus=8)) == (
        f"{src}: [model] converters ['float8']: not modelled by pipesim (the linears priced "
        "in bf16)",
        f"{src}: [compile] enable: torch.compile's fused kernels are not modelled by pipesim "
        "(priced as eager ones)",
        f"{src}: [float8]: not modelled by pipesim (ignored)")


def test_a_torchtitan_job_of_early_2025_reads_its_batch_and_converters(tmp_path):
    """torchtitan's llama3_405b.toml before the rename: [training] batch_size (now
    local_batch_size) and compile, converters as a comma-separated string. The batch was
    dropped (the job ran at the default local batch of 8, four times the job's 2)."""
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\ntokenizer_path = "t.model"\n'
                    'converters = "float8"\n[training]\nbatch_size = 2\nseq_len = 2048\n'
                    "compile = true\n")
    got = read_torchtitan_job(str(path), gpus=8)
    src = f"--torchtitan {path}"
    assert (got.launch.micro_batch, got.launch.global_batch) == (2, 2 * 8)
    assert tuple(w for w in got.warnings if "FSDP" not in w) == (
        f"{src}: [model] converters ['float8']: not modelled by pipesim (the linears priced "
        "in bf16)",
        f"{src}: [training] compile: torch.compile's fused kernels are not modelled by "
        "pipesim (priced as eager ones)")
    assert f"{src}: [training] batch_size 2: the local batch (local_batch_size, as torchtitan " \
           "has named it since 2025)" in got.notes
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nbatch_size = 2\n'
                    "local_batch_size = 4\n")
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=8)
    assert str(err.value) == (f"{src}: [training] batch_size: expected not together with "
                              "local_batch_size (its name since torchtitan renamed it), found 2")
    # a refusal of the batch names the key the job gives it
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nbatch_size = 4\n'
                    "global_batch_size = 6\n")
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=8)
    assert str(err.value) == (f"{src}: [training] global_batch_size: expected a multiple of "
                              "batch_size 4 x the data-parallel degree 8, found 6")


def test_a_torchtitan_job_of_2024_reads_its_parallelism_from_training_and_experimental(
        tmp_path):
    """Before its [parallelism] section (pytorch/torchtitan 785c34c99, March 2025) torchtitan
    read the degrees from [training] and the pipeline from [experimental], its microbatches as
    a count. pipesim took [experimental] as a section of no effect: a PP 4, TP 2 job ran at
    PP 1, TP 1 (the FSDP degree from the GPUs)."""
    path = tmp_path / "job.toml"
    old = ('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nbatch_size = 8\n'
           "seq_len = 2048\ntensor_parallel_degree = 2\ndata_parallel_shard_degree = 1\n"
           '[experimental]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = "1F1B"\n')
    path.write_text(old + "pipeline_parallel_microbatches = 4\nenable_async_tensor_parallel = true\n")
    got = read_torchtitan_job(str(path), gpus=8)
    src = f"--torchtitan {path}"
    launch = got.launch
    assert (launch.tp, launch.pp, launch.dp, launch.micro_batch, launch.microbatches,
            launch.schedule) == (2, 4, 1, 2, 4, "1f1b")
    assert (f"{src}: [training] data_parallel_shard_degree, [training] tensor_parallel_degree, "
            "[experimental] enable_async_tensor_parallel, [experimental] "
            "pipeline_parallel_degree, [experimental] pipeline_parallel_schedule, "
            "[experimental] pipeline_parallel_microbatches: read as [parallelism] keys, their "
            "section since torchtitan moved them (March 2025)") in got.notes
    # what pipesim does not model is named as under today's name, not dropped with
    # [experimental]
    assert [w for w in got.warnings if "not modelled" in w] == [
        f"{src}: [parallelism] enable_async_tensor_parallel: not modelled by pipesim (ignored)"]
    for extra, line in (
            ("pipeline_parallel_microbatches = 3\n",
             "[experimental] pipeline_parallel_microbatches: expected a divisor of batch_size "
             "8, found 3"),
            ("", "[experimental] pipeline_parallel_degree: expected "
             "pipeline_parallel_microbatches beside it (the torchtitan of [experimental] then "
             "ran as many microbatches as stages, which pipesim does not derive), found 4"),
            ('pipeline_parallel_microbatches = 4\npipeline_parallel_split_points = ["layers.8"]\n',
             "[experimental] pipeline_parallel_split_points: expected module_fqns_per_model_part "
             "or pipeline_parallel_layers_per_stage (today's names for the split, which pipesim "
             "reads), found ['layers.8']"),
            ("pipeline_parallel_microbatches = 4\n[parallelism]\ntensor_parallel_degree = 2\n",
             "[training] tensor_parallel_degree: expected not together with [parallelism] "
             "tensor_parallel_degree (its section since torchtitan moved it, March 2025), "
             "found 2")):
        path.write_text(old + extra)
        with pytest.raises(ConfigError) as err:
            read_torchtitan_job(str(path), gpus=8)
        assert str(err.value) == f"{src}: {line}"


def test_torchtitans_norm_type_fused_is_what_is_priced_others_are_warned(tmp_path):
    """[model] norm_type (torchtitan until 2025): its fused_rmsnorm is the kernel a llama
    layer's norms are priced as, so it says nothing (its train_configs of April 2024 set it,
    and --strict refused them); rmsnorm, its eager one, and the layer norms are warned."""
    path = tmp_path / "job.toml"
    src = f"--torchtitan {path}"
    for norm, line in (("fused_rmsnorm", None),
                       ("rmsnorm", "its eager RMSNorm (several kernels) priced as a fused "
                        "RMSNorm kernel"),
                       ("layernorm", "its layernorm priced as a fused RMSNorm kernel")):
        path.write_text(f'[model]\nname = "llama3"\nflavor = "8B"\nnorm_type = "{norm}"\n')
        got = [w for w in read_torchtitan_job(str(path), gpus=8).warnings if "[model] norm_type" in w]
        assert got == ([] if line is None else [f"{src}: [model] norm_type {norm!r}: {line}"])
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\nnorm_type = "batchnorm"\n')
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=8)
    assert str(err.value) == (f"{src}: [model] norm_type: expected layernorm, np_layernorm, "
                              "rmsnorm or fused_rmsnorm, found 'batchnorm'")


def test_torchtitan_refusals_name_the_key(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(TOML.replace('"Interleaved1F1B"', '"1F1B"').replace(
        "pipeline_parallel_microbatch_size = 2", "pipeline_parallel_layers_per_stage = 3"))
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=64)
    assert str(err.value) == (f"--torchtitan {path}: [parallelism] pipeline_parallel_schedule: "
                              "expected a multi-stage schedule for 3 stages per rank, found "
                              "'1F1B'")
    path.write_text(TOML.replace('flavor = "8B"', 'flavor = "3B"'))
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=64)
    assert str(err.value) == (f"--torchtitan {path}: [model] llama3 flavor '3B': pipesim knows "
                              "torchtitan's llama3 flavors (debugmodel, 8B, 70B, 405B); give "
                              "the shape with --hf-config or the model flags")
    path.write_text(TOML.replace("local_batch_size = 16", "local_batch_size = 6"))
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=64)
    assert str(err.value) == (f"--torchtitan {path}: [training] global_batch_size: expected a "
                              "multiple of local_batch_size 6 x the data-parallel degree 2, "
                              "found 64")
    path.write_text(TOML.replace("local_batch_size = 16", "local_batch_size = 8").replace(
        "global_batch_size = 64", "global_batch_size = 16"))
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=64)
    assert str(err.value) == (f"--torchtitan {path}: [training] local_batch_size: expected at "
                              "least 8 microbatches (one per stage, torchtitan's rule), found "
                              "4 microbatches")


def test_torchtitan_layers_per_stage_and_less_layers_give_torchtitans_uneven_split(tmp_path):
    # 32 layers + 2 + 0 effective over ceil(34 / 3) = 12 stages: 2 each and the first ten one
    # more; the first stage then holds 2 fewer, the last none fewer
    path = tmp_path / "job.toml"
    path.write_text(TOML.replace("pipeline_parallel_microbatch_size = 2",
                                 "pipeline_parallel_microbatch_size = 1\n"
                                 "pipeline_parallel_layers_per_stage = 3\n"
                                 "pipeline_parallel_first_stage_less_layers = 2\n"
                                 "pipeline_parallel_last_stage_less_layers = 0"))
    launch = read_torchtitan_job(str(path), gpus=64).launch
    assert (launch.pp, launch.vpp, launch.microbatches) == (4, 3, 16)
    assert launch.stage_layers == (1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2)


def _torchtitan_refusal(path, text: str, gpus: int) -> str:
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=gpus)
    return str(err.value)


def test_torchtitan_split_refusals_name_the_key(tmp_path):
    path = tmp_path / "job.toml"
    with_microbatch = "pipeline_parallel_microbatch_size = 2\n"
    # 32 + 1 + 5 effective layers over 8 stages: the smallest holds 4
    assert _torchtitan_refusal(path, TOML.replace(
        "pipeline_parallel_microbatch_size = 2",
        with_microbatch + "pipeline_parallel_last_stage_less_layers = 5"), 64) == (
        f"--torchtitan {path}: [parallelism] pipeline_parallel_last_stage_less_layers: expected "
        "at most the 4 layers of the smallest stage, found 5")
    # debugmodel's 6 layers + 1 + 1 cannot fill pp 8 x 2 stages
    assert _torchtitan_refusal(path, TOML.replace('flavor = "8B"', 'flavor = "debugmodel"').replace(
        "tensor_parallel_degree = 8", "tensor_parallel_degree = 1").replace(
        "pipeline_parallel_degree = 4", "pipeline_parallel_degree = 8"), 16) == (
        f"--torchtitan {path}: [parallelism] pipeline_parallel_degree: expected at most 8 "
        "stages (6 layers + 1 + 1), found 16 stages")
    # a negative weight for the embedding: one line, never a division by zero stages
    assert _torchtitan_refusal(path, TOML.replace(
        "pipeline_parallel_microbatch_size = 2",
        with_microbatch + "pipeline_parallel_layers_per_stage = 4\n"
        "pipeline_parallel_first_stage_less_layers = -40"), 64) == (
        f"--torchtitan {path}: [parallelism] pipeline_parallel_first_stage_less_layers: "
        "expected an integer >= 0, found -40")


@pytest.mark.parametrize("flags, flash, said", [
    ("--use-flash-attn", True, None),
    ("--attention-backend fused", True, None),
    ("--attention-backend unfused", False, None),
    ("--attention-backend auto", True, "note: --attention-backend auto: Transformer Engine's "
     "attention, a fused kernel that keeps no scores"),
    ("--use-mcore-models", True, "note: --use-mcore-models: Transformer Engine's attention, a "
     "fused kernel that keeps no scores"),
    ("--transformer-impl transformer_engine", True, "note: --transformer-impl "
     "transformer_engine: Transformer Engine's attention, a fused kernel that keeps no scores"),
    ("--transformer-impl local --attention-backend auto", False, "note: --attention-backend "
     "auto with the local implementation: the unfused attention, which keeps its scores"),
    ("--use-legacy-models", False, None),
    ("", False, "warning: neither --use-flash-attn nor --attention-backend: the attention keeps "
     "its scores (unfused, as Megatron-LM before Transformer Engine); current Megatron-LM's "
     "default backend (auto) picks a fused kernel that keeps none"),
])
def test_the_attention_kernel_follows_megatrons_implementation(flags, flash, said):
    """Megatron-Core's models run Transformer Engine's attention (auto picks a fused backend,
    none keeps the scores); the local implementation and the legacy models the unfused core.
    A file naming none of the flags (2021-22 Megatron-LM) runs the unfused core, warned."""
    got = megatron_input(BASE.replace("--use-flash-attn ", "") + flags, "a.txt", 8)
    assert got.launch.flash_attention is flash
    lines = [f"warning: {w}" for w in got.warnings] + [f"note: {n}" for n in got.notes]
    attention = [x for x in lines if "attention" in x or "scores" in x]
    assert attention == ([] if said is None else [said.replace(
        ": ", ": --megatron-args a.txt: ", 1)])


def test_legacy_and_core_models_together_are_refused():
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --use-legacy-models: "
                       r"expected not both with --use-mcore-models$"):
        megatron_input(BASE + "--use-legacy-models --use-mcore-models", "a.txt", 8)


def test_recompute_activations_is_selective_and_checkpoint_activations_refused():
    """Megatron-LM's validate_args: --recompute-activations sets the selective granularity;
    --checkpoint-activations (2021) is no longer valid and Megatron exits on it."""
    got = megatron_input(BASE + "--recompute-activations", "a.txt", 8)
    assert got.launch.recompute_granularity == "selective" and got.warnings == ()
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --recompute-activations: "
                       r"expected no --recompute-granularity full with it \(it means selective "
                       r"recompute\), found --recompute-granularity full$"):
        megatron_input(BASE + "--recompute-activations --recompute-granularity full "
                       "--recompute-method uniform --recompute-num-layers 1", "a.txt", 8)
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --checkpoint-activations: "
                       r"no longer valid \(Megatron-LM refuses it\); expected "
                       r"--recompute-activations \(selective\) or, for what it meant in 2021, "
                       r"--recompute-granularity full --recompute-method uniform "
                       r"--recompute-num-layers 1$"):
        megatron_input(BASE + "--checkpoint-activations", "a.txt", 8)


def test_the_2020_name_of_the_virtual_stages_is_refused_with_the_two_of_today():
    """--virtual-pipeline-model-parallel-size lived in Megatron-LM from dd88906264 to
    dcef906978 (Dec 2020 - Feb 2021); read as an unknown flag it would run an interleaved
    launch as 1F1B."""
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: "
                       r"--virtual-pipeline-model-parallel-size: not a flag of Megatron-LM "
                       r"since February 2021 \(it refuses it\); expected "
                       r"--num-layers-per-virtual-pipeline-stage N or, since 2025, "
                       r"--num-virtual-stages-per-pipeline-rank N$"):
        megatron_input(BASE + "--pipeline-model-parallel-size 2 "
                       "--virtual-pipeline-model-parallel-size 2", "a.txt", 8)


def _job(tmp_path, ac: str, parallelism: str = "") -> object:
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 8\n'
                    f'seq_len = 2048\n[parallelism]\n{parallelism}\n{ac}')
    return read_torchtitan_job(str(path), gpus=8), f"--torchtitan {path}"


def test_torchtitans_layer_sac_is_full_recompute_of_every_nth_block(tmp_path):
    """selective_ac_option N checkpoints every N-th block a rank wraps (_apply_layer_sac):
    of Llama 3 8B's 32 layers on one stage, N = 2 recomputes 16, N = 3 recomputes 10; 1 (and
    0) every block. torchtitan's defaults are mode selective, option "2"."""
    for ac, n in (('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"', 16),
                  ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "3"', 10),
                  ("", 16)):
        got, src = _job(tmp_path, ac)
        la = got.launch
        assert (la.recompute, la.recompute_method, la.recompute_num_layers) == ("full", "block", n)
        default = " (torchtitan's default)" if not ac else ""
        option = 2 if n == 16 else 3
        assert (f"{src}: [activation_checkpoint] mode selective{default}, selective_ac_option "
                f"{option}: one block in {option} checkpointed, {n} of each stage's layers "
                f"recomputed whole (--recompute full --recompute-method block "
                f"--recompute-num-layers {n})") in got.notes
    got, _ = _job(tmp_path, '[activation_checkpoint]\nmode = "selective"\n'
                            'selective_ac_option = "1"')
    assert (got.launch.recompute, got.launch.recompute_method) == ("full", None)


def test_torchtitans_op_sac_beyond_llama_and_uneven_stages_are_warned(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\n'
                    'mode = "selective"\nselective_ac_option = "op"\n')
    moe = ModelShape("moe", 4, 1024, 8, ffn=1024, vocab=8192, kv_heads=8, experts=4, topk=2)
    got = read_torchtitan_job(str(path), gpus=8, shape=moe)
    assert got.launch.recompute == "none" and got.launch.recompute_granularity == "selective"
    assert (f"--torchtitan {path}: [activation_checkpoint] mode selective, selective_ac_option "
            "'op': not modelled yet; run as no recompute") in got.warnings
    # torchtitan's split of 32 layers + the embedding + the output over 4 stages
    got, src = _job(tmp_path, '[activation_checkpoint]\nmode = "selective"\n'
                              'selective_ac_option = "4"',
                    "pipeline_parallel_degree = 4\ndata_parallel_shard_degree = 2")
    assert got.launch.stage_layers == (8, 9, 8, 7)
    la = got.launch
    assert (la.recompute, la.recompute_method, la.recompute_num_layers) == ("full", "block", 1)
    assert (f"{src}: [activation_checkpoint] mode selective, selective_ac_option 4: the "
            "stages' 8, 9, 8, 7 layers checkpoint 2, 2, 2, 1 blocks; pipesim recomputes 1 of "
            "each stage") in got.warnings


def test_torchtitans_op_sac_generates_its_recomputed_ops(tmp_path):
    """selective_ac_option "op": the layer keeps what the policy saves, and each row's input
    gradient first runs again what it recomputes: the norms, wk, RoPE, wo, w3, SwiGLU and the
    residual adds, each priced as its forward kernel."""
    from simulator.cli.model_inputs import workload_text
    from simulator.workload.generator import ModelSpec, ParallelSpec, activation_bytes
    from simulator.workload.kernel_presets import kernel_preset
    from simulator.workload.kernels import gemm, price
    from simulator.workload.parser import parse_workload_text

    got, src = _job(tmp_path, '[activation_checkpoint]\nmode = "selective"\n'
                              'selective_ac_option = "op"')
    assert (got.launch.recompute, got.launch.recompute_granularity) == ("none", "op")
    assert any("selective_ac_option 'op': each layer keeps its input" in n for n in got.notes)
    op = parse_workload_text(workload_text(got, gpu="h100"), "op")
    plain = parse_workload_text(workload_text(got._replace(launch=got.launch._replace(
        recompute_granularity=None)), gpu="h100"), "plain")
    spec = ModelSpec(seq=2048, micro_batch=8, **got.shape.spec_fields())
    assert op.header.activation_bytes == activation_bytes(
        spec, ParallelSpec(dp=8, op_recompute=True)) == 2 * 8 * 2048 * (4 * 4096 + 1024 + 14336)
    rows = {r.name: r for r in op.layers}
    base = {r.name: r for r in plain.layers}
    gpu = kernel_preset("h100")
    gap = gpu.kernel_gap_ns
    tokens = 8 * 2048

    def ns(op_):
        return price(op_, gpu).ns + gap

    def mem(nbytes):
        return ns(gemm("x", "fwd", 1, 1, 1)._replace(kind="memory", nbytes=nbytes))

    norm = mem(2 * 2 * tokens * 4096)
    # the complex fp32 RoPE of Q (4096 wide) and K (1024): cast up (2 + 4 B an element), rotate
    # (4 + 4), cast back (4 + 2)
    rope = sum(mem(6 * e) + mem(8 * e) + mem(6 * e) for e in (tokens * 4096, tokens * 1024))
    # attention_column: the input norm, wk (h -> 1024) and the rotation again
    assert rows["attention_column"].ig_compute - base["attention_column"].ig_compute == \
        norm + ns(gemm("k", "ig", tokens, 1024, 4096)) + rope
    # attention_row: wo (h -> h) and the residual add (read two, write one)
    add = ns(gemm("x", "fwd", 1, 1, 1)._replace(kind="memory", nbytes=3 * 2 * tokens * 4096))
    assert rows["attention_row"].ig_compute - base["attention_row"].ig_compute == \
        ns(gemm("o", "ig", tokens, 4096, 4096)) + add
    for name in ("attention_column", "attention_row", "mlp_column", "mlp_row"):
        assert rows[name].fwd_compute == base[name].fwd_compute
        assert rows[name].wg_compute == base[name].wg_compute


@pytest.mark.parametrize("flags, line", [
    ("--clip-grad nan", "--clip-grad: expected a non-negative number, found nan"),
    ("--clip-grad -1", "--clip-grad: expected a non-negative number, found -1"),
    ("--attention-dropout x", "--attention-dropout: expected a number, found 'x'"),
])
def test_a_bad_number_is_refused_naming_the_flag(flags, line):
    with pytest.raises(ConfigError) as err:
        megatron_input(BASE + flags, "a.txt", 8)
    assert str(err.value) == f"--megatron-args a.txt: {line}"


def test_fp8_format_turns_on_transformer_engines_fp8_linears():
    got = megatron_input(BASE + "--fp8-format hybrid", "a.txt", 8)
    assert got.launch.fp8 == "delayed" and got.warnings == ()   # Megatron-Core's default
    assert any(n.startswith("--megatron-args a.txt: --fp8-format hybrid, recipe delayed: the "
                            "transformer layers' linears run FP8 GEMMs") for n in got.notes)
    assert megatron_input(BASE, "a.txt", 8).launch.fp8 == ""
    assert megatron_input(BASE + "--fp8-format e4m3 --fp8-recipe tensorwise", "a.txt",
                          8).launch.fp8 == "tensorwise"
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --fp8-recipe: expected "
                       r"delayed, tensorwise or blockwise \(mxfp8 is Blackwell's"):
        megatron_input(BASE + "--fp8-format e4m3 --fp8-recipe mxfp8", "a.txt", 8)
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --fp8-format: expected "
                       r"--bf16 with it \(Transformer Engine's FP8 runs beside bf16 weights "
                       r"and activations\), found fp16$"):
        megatron_input(BASE.replace("--bf16", "--fp16") + "--fp8-format e4m3", "a.txt", 8)


FSDP_JOB = ('[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\nlocal_batch_size = 2\n'
            'seq_len = 2048\nglobal_batch_size = 8\n[parallelism]\n'
            'data_parallel_shard_degree = 2\n')


def test_torchtitan_fsdp_reshard_policy_is_read_and_written_back(tmp_path, capsys):
    from simulator.cli.main import main
    from simulator.cli.model_inputs import ddp_option_values

    path = tmp_path / "job.toml"
    path.write_text(FSDP_JOB + 'fsdp_reshard_after_forward = "never"\n')
    got = read_torchtitan_job(str(path), gpus=2)
    assert got.launch.fsdp_reshard_after_forward == "never"
    assert ddp_option_values(got.launch) == {"fsdp": 2, "fsdp_reshard_after_forward": "never"}
    # the policy changes the run (its backward gathers nothing) and survives --launch
    common = ["--gpus", "2", "--system", "configs/system/h100.yaml", "--engine", "evaluator"]
    out = {}
    for name, job in (("never", path), ("default", tmp_path / "d.toml")):
        if name == "default":
            job.write_text(FSDP_JOB)
        assert main(["run", "--torchtitan", str(job), *common, "--json",
                     str(tmp_path / f"{name}.json"), "--launch", str(tmp_path / name)]) == 0
        out[name] = json.loads((tmp_path / f"{name}.json").read_text())["makespan_ns"]
    assert out["never"] < out["default"]
    written = (tmp_path / "never" / "torchtitan.toml").read_text()
    assert 'fsdp_reshard_after_forward = "never"' in written.split("\n")
    assert "fsdp_reshard_after_forward" not in (tmp_path / "default" / "torchtitan.toml"
                                                ).read_text()
    capsys.readouterr()


@pytest.mark.parametrize("gpus, edit, line", [
    (2, 'fsdp_reshard_after_forward = "sometimes"\n',
     "fsdp_reshard_after_forward: expected default, always or never, found 'sometimes'"),
    (4, 'fsdp_reshard_after_forward = "always"\npipeline_parallel_degree = 2\n',
     "fsdp_reshard_after_forward: expected default or never with pipeline_parallel_degree 2 "
     "(resharding after every forward under torch's PipelineStage is not modelled), found "
     "'always'"),
])
def test_torchtitan_fsdp_reshard_policy_refusals(tmp_path, gpus, edit, line):
    path = tmp_path / "job.toml"
    path.write_text(FSDP_JOB + edit)
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=gpus)
    assert str(err.value) == f"--torchtitan {path}: [parallelism] {line}"


def test_the_launch_writes_back_the_ddp_flags_it_read():
    from simulator.export.launch import megatron_model_args

    flags = ("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather")
    got = megatron_input(BASE + " ".join(flags), "a.txt", 8)
    out = megatron_model_args(got.shape, got.launch, 1)
    assert [f for f in flags if f in out] == list(flags)
    plain = megatron_input(BASE, "a.txt", 8)
    assert not [f for f in flags if f in megatron_model_args(plain.shape, plain.launch, 1)]


def test_the_launch_writes_back_the_zero_bubble_forks_flags(tmp_path, capsys):
    """A launch of the fork's own layout reads back to the same schedule, limit and
    post-validation, and the same time."""
    from simulator.cli.main import main

    src = tmp_path / "zb.txt"
    src.write_text(ZB_BASE + "--enable-zero-bubble --zero-bubble-max-pending-backward 6 "
                   "--enable-optimizer-post-validation")
    launch = tmp_path / "launch"
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["run", "--megatron-args", str(src), "--gpus", "4", "--iterations", "2",
                 "--launch", str(launch), "--json", str(first)]) == 0
    args = (launch / "megatron_args.txt").read_text().splitlines()
    assert args[3:6] == ["--enable-zero-bubble", "--zero-bubble-max-pending-backward 6",
                         "--enable-optimizer-post-validation"]
    written = megatron_input(" ".join(a for a in args if not a.startswith("#")), "again.txt",
                             4).launch
    assert (written.schedule, written.zero_bubble_max_pending,
            written.optimizer_post_validation) == ("zb-greedy", 6, True)
    assert main(["run", "--megatron-args", str(launch / "megatron_args.txt"), "--gpus", "4",
                 "--iterations", "2", "--json", str(again)]) == 0
    capsys.readouterr()
    steady = json.loads(first.read_text())["steady_iteration_ns"]
    assert steady > 0 and json.loads(again.read_text())["steady_iteration_ns"] == steady


@pytest.mark.parametrize("setup, schedule", [("half", "v-half"), ("min", "v-min"),
                                             ("zb", "v-zb")])
def test_the_launch_writes_back_the_forks_v_schedule(tmp_path, capsys, setup, schedule):
    """A launch of the fork's V-Half / V-Min / V-ZB: its own flags (no virtual-stage flag: the V
    schedule sets two chunks a rank), read back to the same schedule and time."""
    from simulator.cli.main import main

    src = tmp_path / "zbv.txt"
    src.write_text(ZB_BASE + "--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup "
                   f"{setup} --enable-optimizer-post-validation")
    launch = tmp_path / "launch"
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["run", "--megatron-args", str(src), "--gpus", "4", "--iterations", "2",
                 "--launch", str(launch), "--json", str(first)]) == 0
    args = (launch / "megatron_args.txt").read_text().splitlines()
    assert args[:6] == ["--tensor-model-parallel-size 1", "--pipeline-model-parallel-size 4",
                        "--num-layers 24", "--zero-bubble-v-schedule",
                        f"--zero-bubble-v-schedule-mem-setup {setup}",
                        "--enable-optimizer-post-validation"]
    assert main(["run", "--megatron-args", str(launch / "megatron_args.txt"), "--gpus", "4",
                 "--iterations", "2", "--json", str(again)]) == 0
    capsys.readouterr()
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert a["schedule"] == b["schedule"] == schedule and a["vpp"] == b["vpp"] == 2
    assert a["steady_iteration_ns"] > 0 and b["steady_iteration_ns"] == a["steady_iteration_ns"]


def test_the_forks_own_zb_v_layout_is_laid_out_for_the_run_and_noted():
    got = megatron_input(ZB_BASE + "--zero-bubble-v-schedule", "zb.txt", 8)
    assert got.launch.schedule == "v-zb"
    src = "--megatron-args zb.txt: --zero-bubble-v-schedule"
    assert not [w for w in got.warnings if "zero-bubble-v" in w]
    assert (f"{src} (memory setup zb): v-zb, laid out over the run's own costs, as the fork "
            "lays it out over its profiled ones, two chunks a rank in a V") in got.notes
    half = megatron_input(ZB_BASE + "--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup "
                          "half", "zb.txt", 8)
    assert not [w for w in half.warnings if "zero-bubble-v" in w]
    assert (f"{src} (memory setup half): v-half, the fork's own order, two chunks a rank in "
            "a V") in half.notes


ZB_BASE = ("--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
           "--micro-batch-size 1 --global-batch-size 32 --fp16 "
           "--pipeline-model-parallel-size 4 ")


@pytest.mark.parametrize("flags, schedule, vpp, post", [
    ("", "1f1b", 1, False),
    ("--enable-zero-bubble --zero-bubble-max-pending-backward 4 "
     "--enable-optimizer-post-validation", "zb-greedy", 1, True),
    ("--enable-zero-bubble --zero-bubble-max-pending-backward 8", "zb-greedy", 1, False),
    ("--zero-bubble-v-schedule --enable-optimizer-post-validation", "v-zb", 2, True),
    ("--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup half", "v-half", 2, False),
    ("--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup min", "v-min", 2, False),
    # the fork turns post-validation off without zero bubble
    ("--enable-optimizer-post-validation", "1f1b", 1, False),
])
def test_the_zero_bubble_forks_flags_choose_the_schedule(flags, schedule, vpp, post):
    la = megatron_input(ZB_BASE + flags, "zb.txt", 8).launch
    assert (la.schedule, la.vpp, la.optimizer_post_validation) == (schedule, vpp, post)


def test_the_zero_bubble_forks_memory_limit_is_the_greedys_and_auto_is_warned():
    src = "--megatron-args zb.txt"
    def zb_warnings(got):
        return tuple(w for w in got.warnings if "zero-bubble" in w)

    got = megatron_input(ZB_BASE + "--enable-zero-bubble", "zb.txt", 8)
    assert (got.launch.schedule, got.launch.zero_bubble_max_pending) == ("zb-greedy", 4)
    assert zb_warnings(got) == (f"{src}: --zero-bubble-max-pending-backward auto (the fork's "
                            "default, a memory limit set from the GPU's free memory as it "
                            "runs): run as zb-greedy under 4 forwards' memory, ZB-1p's limit",)
    # any limit is the fork's greedy's, not only p and 2p: no warning, a note
    got = megatron_input(ZB_BASE + "--enable-zero-bubble --zero-bubble-max-pending-backward 6",
                         "zb.txt", 8)
    assert (got.launch.schedule, got.launch.zero_bubble_max_pending) == ("zb-greedy", 6)
    assert zb_warnings(got) == ()
    assert f"{src}: --enable-zero-bubble --zero-bubble-max-pending-backward 6: zb-greedy, the " \
           "fork's own layout for the run's F / I / W costs and memory under 6 forwards' " \
           "activations" in got.notes
    got = megatron_input(ZB_BASE + "--enable-zero-bubble --zero-bubble-max-pending-backward 8",
                         "zb.txt", 8)
    assert any("--zero-bubble-max-pending-backward 8 (ZB-2p): zb-greedy" in n
               for n in got.notes)
    got = megatron_input(ZB_BASE + "--enable-optimizer-post-validation", "zb.txt", 8)
    assert f"{src}: --enable-optimizer-post-validation: no effect without " \
           "--enable-zero-bubble (the zero-bubble fork turns it off)" in got.notes


@pytest.mark.parametrize("flags, message", [
    ("--enable-zero-bubble --zero-bubble-max-pending-backward x",
     "--zero-bubble-max-pending-backward: expected a whole number or auto, found x"),
    ("--enable-zero-bubble --zero-bubble-max-pending-backward 0",
     "--zero-bubble-max-pending-backward: expected a positive whole number or auto, found 0"),
    ("--enable-zero-bubble --num-layers-per-virtual-pipeline-stage 2",
     "--enable-zero-bubble: expected no virtual stages with it (the fork runs its own "
     "schedule; --zero-bubble-v-schedule places two chunks a rank), found 3 virtual stages"),
    ("--enable-zero-bubble --use-distributed-optimizer --overlap-grad-reduce",
     "--enable-zero-bubble: expected no --overlap-grad-reduce or --overlap-param-gather with "
     "the distributed optimizer (the zero-bubble fork's rule), found an overlap"),
    ("--zero-bubble-v-schedule --num-layers 28",
     "--zero-bubble-v-schedule: expected an even number of layers on each of the 4 stages "
     "(the fork's rule), found 28"),
    ("--zero-bubble-v-schedule-mem-setup full --enable-zero-bubble",
     "--zero-bubble-v-schedule-mem-setup: expected one of zb, half, min, found 'full'"),
])
def test_what_the_zero_bubble_fork_refuses_is_refused_in_one_line(flags, message):
    text = ZB_BASE + flags
    if "--num-layers 28" in flags:
        text = text.replace("--num-layers 24 ", "")
    with pytest.raises(ConfigError) as err:
        megatron_input(text, "zb.txt", 8)
    assert str(err.value) == f"--megatron-args zb.txt: {message}"


@pytest.mark.parametrize("layers, pp, vpp, counts", [
    (22, 8, 1, [2, 3, 3, 3, 3, 3, 3, 2]),       # the zero-bubble paper's 1.5B: one off each end
    (30, 8, 1, [3, 4, 4, 4, 4, 4, 4, 3]),
    (21, 8, 1, [2, 2, 3, 3, 3, 3, 3, 2]),       # three padding layers: the last, then the first two
    (22, 4, 2, [2, 3, 3, 3, 3, 3, 3, 2]),       # chunks in pipeline order
])
def test_the_zero_bubble_forks_padding_takes_layers_off_the_ends(layers, pp, vpp, counts):
    from simulator.workload.inputs.megatron_args import padded_counts

    assert padded_counts(layers, pp, vpp) == counts
    assert sum(counts) == layers


def test_a_padded_launch_places_its_layers_as_the_fork_does():
    text = ZB_BASE.replace("--num-layers 24", "--num-layers 22").replace(
        "--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 8")
    got = megatron_input(text + "--allow-padding-num-layers --enable-zero-bubble "
                         "--zero-bubble-max-pending-backward 16", "zb.txt", 8)
    assert (got.launch.schedule, got.launch.zero_bubble_max_pending,
            got.launch.stage_layers) == ("zb-greedy", 16, (2, 3, 3, 3, 3, 3, 3, 2))
    assert ("--megatron-args zb.txt: --allow-padding-num-layers: 22 layers padded to 24, the "
            "padding taken one a chunk off the last and the first: 2 3 3 3 3 3 3 2 (the "
            "zero-bubble fork's get_offset)") in got.notes
    with pytest.raises(ConfigError) as err:
        megatron_input(text + "--allow-padding-num-layers --decoder-first-pipeline-num-layers 2",
                       "zb.txt", 8)
    assert str(err.value) == ("--megatron-args zb.txt: --allow-padding-num-layers: expected no "
                              "other layer-placement flag with it (the zero-bubble fork places "
                              "the layers itself), found 22")


def test_no_gradient_accumulation_fusion_is_read_and_said():
    got = megatron_input(BASE + "--no-gradient-accumulation-fusion", "a.txt", 8)
    assert got.launch.grad_accumulation_fusion is False and got.warnings == ()
    assert ("--megatron-args a.txt: --no-gradient-accumulation-fusion: each weight-gradient GEMM "
            "writes a 16-bit gradient that the DDP's hook adds into main_grad (an elementwise "
            "kernel: the gradient and main_grad read, main_grad written), priced per "
            "microbatch") in got.notes
    assert megatron_input(BASE, "a.txt", 8).launch.grad_accumulation_fusion is True


@pytest.mark.parametrize("flags, main_grad", [
    ("--bf16", 4), ("--bf16 --grad-reduce-in-bf16", 2), ("--fp16", 2),
    ("--fp16 --accumulate-allreduce-grads-in-fp32", 4)])
def test_the_main_gradients_dtype_follows_the_reduction_as_megatron_cores_grad_buffer(
        flags, main_grad):
    """Megatron-Core's DDP keeps the gradients in its buffer's dtype, fp32 where it reduces in
    fp32, else the parameters' 16-bit one: what the weight-gradient GEMM accumulates into."""
    launch = megatron_input(BASE.replace("--bf16 ", "") + flags, "a.txt", 8).launch
    assert launch.code_fields()["main_grad_bytes"] == main_grad


def test_checkpoint_logging_and_constant_flags_of_megatrons_test_launches_change_nothing():
    """Flags every launch of Megatron-LM's functional tests carries (checkpointing, the
    logger's interval writes, the NCCL backend, the fused softmax's dtype) are read as changing
    nothing, so --strict does not refuse such a launch for them; what does change an
    iteration (the parameters' norm each iteration) is priced in the step, not warned."""
    flags = ("--distributed-backend nccl --async-save --use-persistent-ckpt-worker "
             "--dist-ckpt-strictness log_all --log-memory-to-tensorboard "
             "--log-validation-ppl-to-tensorboard --attention-softmax-in-fp32 "
             "--norm-epsilon 1e-5 --log-params-norm")
    got = megatron_input(BASE + flags, "a.txt", 8)
    assert got.warnings == () and got.launch.log_params_norm
    said = next(n for n in got.notes if "no effect on an iteration" in n)
    for flag in ("--distributed-backend", "--async-save", "--use-persistent-ckpt-worker",
                 "--dist-ckpt-strictness", "--log-memory-to-tensorboard",
                 "--log-validation-ppl-to-tensorboard", "--attention-softmax-in-fp32",
                 "--norm-epsilon"):
        assert flag in said
    assert megatron_input(BASE + "--distributed-backend gloo", "a.txt", 8).warnings == (
        "--megatron-args a.txt: --distributed-backend gloo: pipesim prices the collectives and "
        "transfers on the system's links, as NCCL runs them",)


def test_make_vocab_size_divisible_by_sets_megatrons_padding():
    from simulator.workload.generator import ModelSpec, ParallelSpec, padded_vocab

    got = megatron_input(BASE + "--make-vocab-size-divisible-by 64", "a.txt", 8)
    assert got.launch.vocab_divisor == 64 and got.warnings == ()
    assert megatron_input(BASE, "a.txt", 8).launch.vocab_divisor == 128
    # GPT-2's 50,257 at TP 2: a multiple of 128 x 2 = 256 is 50,432, of 64 x 2 50,304, of 1 x 2
    # 50,258; torchtitan pads nothing (its TP shards are uneven)
    gpt2 = ModelSpec("gpt", 2, 1024, 16, 1024, 1, vocab=50257)
    assert [padded_vocab(gpt2, ParallelSpec(tp=2, vocab_divisor=n)) for n in (128, 64, 1)] == [
        50432, 50304, 50258]
    assert padded_vocab(gpt2, ParallelSpec(tp=1, runtime="torchtitan")) == 50257
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: "
                       r"--make-vocab-size-divisible-by: expected a positive integer, found 0$"):
        megatron_input(BASE + "--make-vocab-size-divisible-by 0", "a.txt", 8)


def test_no_rope_fusion_and_rotary_percent_are_read():
    llama = (BASE + "--swiglu --normalization RMSNorm --disable-bias-linear "
             "--position-embedding-type rope ")
    got = megatron_input(llama + "--no-rope-fusion --rotary-percent 0.5", "a.txt", 8)
    assert (got.launch.rope_fusion, got.launch.rotary_percent) == (False, 0.5)
    assert ("--megatron-args a.txt: --no-rope-fusion: RoPE as PyTorch ops on 0.5 of each head's "
            "channels of Q and K (t·cos + rotate_half(t)·sin, the pass-through concatenated; the "
            "backward as autograd runs it), not Megatron-LM's fused kernel") in got.notes
    # the fused kernel reads and writes all of Q and K whatever the fraction
    fused = megatron_input(llama + "--rotary-percent 0.5", "a.txt", 8)
    assert fused.launch.rope_fusion and "--rotary-percent" in next(
        n for n in fused.notes if "no effect on an iteration" in n)
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --rotary-percent: expected "
                                          r"a fraction in \(0, 1\], found 1.5$"):
        megatron_input(llama + "--rotary-percent 1.5", "a.txt", 8)
    # a gpt model has learned positions: nothing of RoPE is priced
    gpt = megatron_input(BASE + "--no-rope-fusion", "a.txt", 8)
    assert "--no-rope-fusion" in next(n for n in gpt.notes if "no effect on an iteration" in n)


def test_the_logging_flags_reach_the_runs_step_and_are_not_warned():
    from simulator.cli.model_inputs import run_option_values

    got = megatron_input(BASE + "--log-num-zeros-in-grad --log-params-norm "
                         "--calculate-per-token-loss", "a.txt", 8)
    assert (got.launch.log_num_zeros_in_grad, got.launch.log_params_norm,
            got.launch.calculate_per_token_loss) == (True, True, True)
    values = run_option_values(got.launch)
    assert (values["log_num_zeros_in_grad"], values["log_params_norm"],
            values["calculate_per_token_loss"]) == (True, True, True)
    assert not any("--log-" in w for w in got.warnings)
    plain = megatron_input(BASE, "a.txt", 8).launch
    assert (plain.log_num_zeros_in_grad, plain.log_params_norm) == (False, False)


def small_gpt(**kw):
    """One gpt layer of 2 sequences x 1024 tokens, hidden 1024."""
    from simulator.workload.generator import ModelSpec
    return ModelSpec("gpt", hidden=1024, heads=16, layers=1, seq=1024, micro_batch=2, **kw)


def op_bytes(ops) -> list[tuple[str, str, int]]:
    """Each kernel's (name, phase, bytes)."""
    return [(o.name, o.phase, o.nbytes) for o in ops]


def read_as_noted(flag: str, field: str, value: bool, note: str) -> None:
    """``flag`` on the base launch sets the launch's ``field`` (and the generator keyword of
    the same name) to ``value``, with ``note`` named after it, and warns nothing of it."""
    got = megatron_input(BASE + flag, "a.txt", 8)
    assert getattr(got.launch, field) is value
    assert got.launch.code_fields()[field] is value
    assert f"--megatron-args a.txt: {flag}: {note}" in got.notes
    assert not any(flag in w for w in got.warnings)


def test_no_bias_gelu_fusion_adds_the_bias_in_a_kernel_of_its_own():
    from simulator.workload import layer_ops
    from simulator.workload.generator import ParallelSpec

    read_as_noted("--no-bias-gelu-fusion", "bias_gelu_fusion", False,
                  "the MLP's bias added by a kernel of its own (the f-wide activation read and "
                  "written) before GELU")
    # 2 sequences x 1024 tokens x 4096 FFN elements, bf16: the fused kernel reads and writes
    # them once (2 x 2 B), unfused the add does so too, GELU's backward is the same 3 x 2 B
    e = 2 * 1024 * 4096

    def act(par):
        return [op for op in op_bytes(layer_ops.mlp_column_ops(small_gpt(), par))
                if "gelu" in op[0] or op[0] == "bias_add"]

    assert act(ParallelSpec(precision="bf16")) == [("bias_gelu", "fwd", 4 * e),
                                                   ("bias_gelu_bwd", "ig", 6 * e)]
    assert act(ParallelSpec(precision="bf16", bias_gelu_fusion=False)) == [
        ("bias_add", "fwd", 4 * e), ("gelu", "fwd", 4 * e), ("gelu_bwd", "ig", 6 * e)]
    # a SwiGLU MLP, or one without biases, has no bias + GELU to fuse
    llama = megatron_input(BASE + "--swiglu --normalization RMSNorm --disable-bias-linear "
                           "--position-embedding-type rope --no-bias-gelu-fusion", "a.txt", 8)
    assert llama.launch.bias_gelu_fusion and "--no-bias-gelu-fusion" in next(
        n for n in llama.notes if "no effect on an iteration" in n)


def test_the_fused_cross_entropy_makes_fewer_passes_over_the_logits():
    """--cross-entropy-loss-fusion: Megatron-LM's native fused loss, its four torch.compile'd
    functions one Inductor kernel each (layer_ops.cross_entropy_ops): d + 24 bytes a logit
    forward where the unfused loss makes d + 36, 18 backward where it makes d + 12 (a copy of
    the kept softmax, the gradient in bf16 and the product written back); its backward holds
    the copy and the bf16 gradient, 6 B a logit."""
    from simulator.workload import layer_ops
    from simulator.workload.generator import ParallelSpec, loss_bytes

    read_as_noted("--cross-entropy-loss-fusion", "cross_entropy_fusion", True,
                  "the loss's fp32 passes as torch.compile fuses them (Megatron-LM's native "
                  "impl)")
    # 2 sequences x 1024 tokens x 32000 logits over TP 2, bf16
    e = 2 * 1024 * 16000

    def ce(par):
        return op_bytes(layer_ops.cross_entropy_ops(small_gpt(), par, 32000))

    assert ce(ParallelSpec(tp=2, precision="bf16")) == [
        ("cross_entropy", "fwd", 38 * e), ("cross_entropy_bwd", "ig", 14 * e)]
    assert ce(ParallelSpec(tp=2, precision="bf16", cross_entropy_fusion=True)) == [
        ("cross_entropy", "fwd", 26 * e), ("cross_entropy_bwd", "ig", 18 * e)]
    padded = small_gpt(vocab=32000)
    logits = 2 * 1024 * 16000      # 32000 is a multiple of 128 x 2: no padding
    assert loss_bytes(padded, ParallelSpec(tp=2, precision="bf16")) == (
        4 * logits, 2 * logits, 2 * logits)
    assert loss_bytes(padded, ParallelSpec(tp=2, precision="bf16",
                                           cross_entropy_fusion=True)) == (
        4 * logits, 2 * logits, 6 * logits)


def test_deterministic_mode_is_read_as_megatron_runs_it():
    """--deterministic-mode: NCCL's ring (what pipesim prices), and the kernels it makes
    deterministic named where the launch runs them (Transformer Engine's fused attention, the
    experts' combine); the loss's fusion and TP overlap refused as Megatron-LM refuses them."""
    src = "--megatron-args a.txt"
    unfused = megatron_input(BASE.replace("--use-flash-attn ", "") + "--deterministic-mode "
                             "--attention-backend unfused", "a.txt", 8)
    assert (f"{src}: --deterministic-mode: NCCL's ring collectives, as pipesim prices them; "
            "no kernel it prices changes") in unfused.notes
    assert not any("deterministic" in w for w in unfused.warnings)
    fused = megatron_input(BASE + "--deterministic-mode --use-flash-attn", "a.txt", 8)
    assert (f"{src}: --deterministic-mode: the deterministic kernels of Transformer Engine's "
            "attention backward, priced as the default ones") in fused.warnings
    moe = megatron_input(BASE + "--deterministic-mode --use-flash-attn --swiglu "
                         "--disable-bias-linear --normalization RMSNorm --position-embedding-"
                         "type rope --num-experts 4 --moe-router-topk 2", "a.txt", 8)
    assert (f"{src}: --deterministic-mode: the deterministic kernels of Transformer Engine's "
            "attention backward and of the experts' token combine, priced as the default "
            "ones") in moe.warnings
    for flag in ("--cross-entropy-loss-fusion", "--tensor-model-parallel-size 2 "
                 "--sequence-parallel --tp-comm-overlap"):
        with pytest.raises(ConfigError) as err:
            megatron_input(BASE + f"--deterministic-mode {flag}", "a.txt", 8)
        name = flag.split()[-1]
        assert str(err.value) == (f"{src}: --deterministic-mode: expected no {name} with it "
                                  f"(Megatron-LM's determinism refuses it), found {name}")


def test_rerun_mode_reruns_only_to_report_stats():
    src = "--megatron-args a.txt"
    for mode in ("disabled", "validate_results"):
        got = megatron_input(BASE + f"--rerun-mode {mode}", "a.txt", 8)
        assert "--rerun-mode" in next(n for n in got.notes if "no effect on an iter" in n)
        assert not any("rerun" in w for w in got.warnings)
    stats = megatron_input(BASE + "--rerun-mode report_stats", "a.txt", 8)
    assert (f"{src}: --rerun-mode report_stats: each iteration's forward and backward run "
            "twice (to compare their results); pipesim times one") in stats.warnings


def test_manual_garbage_collection_is_read_as_megatron_runs_it():
    """--manual-gc turns Python's automatic collector off (pipesim prices none either way);
    a collection every --manual-gc-interval iterations is a host pause it warns of; the
    evaluation's collections fall outside the training iteration."""
    src = "--megatron-args a.txt"
    off = megatron_input(BASE + "--manual-gc --no-manual-gc-eval", "a.txt", 8)
    assert (f"{src}: --manual-gc: Python's automatic garbage collector off in training, as "
            "pipesim assumes (it prices no collector's pauses)") in off.notes
    assert "--no-manual-gc-eval" in next(n for n in off.notes if "no effect on an iter" in n)
    assert not any("gc" in w for w in off.warnings)
    every = megatron_input(BASE + "--manual-gc --manual-gc-interval 100", "a.txt", 8)
    assert (f"{src}: --manual-gc-interval 100: a full garbage collection every 100 "
            "iterations, a host pause pipesim does not price") in every.warnings
    alone = megatron_input(BASE + "--manual-gc-interval 100", "a.txt", 8)
    assert not any("gc" in w for w in alone.warnings)
    assert "--manual-gc-interval" in next(n for n in alone.notes if "no effect on an it" in n)
    with pytest.raises(ConfigError) as err:
        megatron_input(BASE + "--manual-gc --manual-gc-interval -1", "a.txt", 8)
    assert str(err.value) == f"{src}: --manual-gc-interval: expected an integer >= 0, found -1"


def test_transformer_engines_fused_cross_entropy_is_refused_as_megatron_refuses_it():
    with pytest.raises(ConfigError) as err:
        megatron_input(BASE + "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
                       "a.txt", 8)
    assert str(err.value) == (
        "--megatron-args a.txt: --cross-entropy-fusion-impl: expected native with "
        "--cross-entropy-loss-fusion (Megatron-LM refuses Transformer Engine's fused "
        "cross-entropy), found te")
    # the impl without the fusion changes nothing
    alone = megatron_input(BASE + "--cross-entropy-fusion-impl te", "a.txt", 8)
    assert not alone.launch.cross_entropy_fusion and "--cross-entropy-fusion-impl" in next(
        n for n in alone.notes if "no effect on an iteration" in n)


@pytest.mark.parametrize("flag", ["--attention-softmax-in-fp32",
                                  "--apply-query-key-layer-scaling"])
def test_an_fp32_softmax_changes_nothing_but_the_unfused_one(flag):
    """The fused softmax (and a fused attention kernel) computes in fp32 inside;
    --apply-query-key-layer-scaling is its scale, and turns the fp32 softmax on. Without flash
    attention and without the fused kernel the fp32 softmax is a cast, not counted."""
    got = megatron_input(BASE + flag, "a.txt", 8)
    assert not got.warnings
    assert flag in next(n for n in got.notes if "no effect on an iteration" in n)
    unfused = BASE.replace("--use-flash-attn ", "--attention-backend unfused ")
    got = megatron_input(f"{unfused}--no-masked-softmax-fusion {flag}", "a.txt", 8)
    assert got.warnings == (
        "--megatron-args a.txt: --no-masked-softmax-fusion: the unfused attention's softmax is "
        "priced as Megatron's fused scale-mask-softmax kernel (and "
        f"{flag}'s fp32 copy is not counted)",)
