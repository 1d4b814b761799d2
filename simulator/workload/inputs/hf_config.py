"""A Hugging Face ``config.json`` as the generator's model shape.

Families and their keys (the ``transformers`` configuration classes' names and defaults):

===============================  ====  ===================================================
``model_type``                   arch  keys
===============================  ====  ===================================================
llama, mistral, qwen2, qwen3     llama hidden_size, num_hidden_layers, num_attention_heads,
                                       num_key_value_heads (default: the heads),
                                       intermediate_size, vocab_size, tie_word_embeddings,
                                       max_position_embeddings
gpt2                             gpt   n_embd, n_layer, n_head, n_inner (null: 4h),
                                       vocab_size, n_positions; tied by default
gpt_neox                         gpt   as llama, no key/value heads; intermediate_size
mixtral                          moe   as llama; num_local_experts, num_experts_per_tok,
                                       intermediate_size is one expert's
qwen2_moe, qwen3_moe             moe   num_experts, num_experts_per_tok, moe_intermediate_size
deepseek, deepseek_v2/v3         moe   n_routed_experts, num_experts_per_tok,
                                       moe_intermediate_size
===============================  ====  ===================================================

What the generator's model cannot express (a sliding window, dense first
layers, attention biases, a parallel residual, latent attention, ...) is a warning naming the
key; a family outside the table is refused in one line.
"""

from __future__ import annotations

import json

from ...errors import ConfigError
from ._files import positive, read_text
from .shape import ModelInput, ModelShape

OPTION = "--hf-config"
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek", "deepseek_v2", "deepseek_v3")
FAMILIES = LLAMA_LIKE + ("gpt2", "gpt_neox") + MOE
# transformers' default of tie_word_embeddings per configuration class (PretrainedConfig: True)
TIED_DEFAULT = {"gpt2": True}
SILU = ("silu", "swish")


def read_hf_config(path: str) -> ModelInput:
    """The shape a ``config.json`` describes (see the module's table)."""
    text = read_text(path, OPTION)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{OPTION} {path}:{err.lineno}:{err.colno}: expected JSON "
                          f"({err.msg})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{OPTION} {path}: expected a JSON object (a model's config.json), "
                          f"found {type(cfg).__name__}")
    family = cfg.get("model_type")
    if family not in FAMILIES:
        found = "no model_type" if family is None else f"model_type {family!r}"
        raise ConfigError(f"{OPTION} {path}: {found}: pipesim reads the "
                          + ", ".join(FAMILIES[:-1]) + f" and {FAMILIES[-1]} families")
    return _Reader(path, cfg, family).read()


class _Reader:
    def __init__(self, path: str, cfg: dict, family: str) -> None:
        self.path, self.cfg, self.family = path, cfg, family
        self.warnings: list[str] = []
        self.notes: list[str] = []

    def int_key(self, key: str, default=None) -> int:
        value = self.cfg.get(key, default)
        return positive(value, f"{OPTION} {self.path}: {key}",
                        f"a positive integer (the {self.family} family's {key})")

    def positions(self, key: str) -> int | None:
        """The longest sequence the model was built for (``key``), None where the config
        states none; anything but a positive integer is refused like every other size."""
        return None if self.cfg.get(key) is None else self.int_key(key)

    def warn(self, key: str, text: str) -> None:
        self.warnings.append(f"{OPTION} {self.path}: {key}: {text}")

    def read(self) -> ModelInput:
        fam, cfg = self.family, self.cfg
        if fam == "gpt2":
            shape = self._gpt2()
        else:
            layers = self.int_key("num_hidden_layers")
            hidden = self.int_key("hidden_size")
            heads = self.int_key("num_attention_heads")
            vocab = self.int_key("vocab_size")
            kv = self.int_key("num_key_value_heads", heads) if fam != "gpt_neox" else None
            arch = "gpt" if fam == "gpt_neox" else "moe" if fam in MOE else "llama"
            if fam in MOE:
                experts, topk, ffn, shared_ffn = self._experts()
            else:
                experts, topk, ffn, shared_ffn = 1, 2, self.int_key("intermediate_size"), 0
            shape = ModelShape(arch, layers, hidden, heads, ffn=ffn, vocab=vocab, kv_heads=kv,
                               experts=experts, topk=topk, shared_ffn=shared_ffn,
                               tied_embeddings=bool(cfg.get("tie_word_embeddings",
                                                            TIED_DEFAULT.get(fam, False))),
                               max_positions=self.positions("max_position_embeddings"))
            if fam == "gpt_neox":
                self._neox()
            else:
                self._llama_like(shape)
        if shape.tied_embeddings:
            self.warn("tie_word_embeddings", "the LM head's weights are counted apart from the "
                      "embedding's (as Megatron-LM keeps a copy on the last stage; at pp 1 they "
                      "are one tensor, V x h fewer parameters)")
        return ModelInput(f"{OPTION} {self.path}", shape, None, tuple(self.warnings),
                          tuple(self.notes))

    def _gpt2(self) -> ModelShape:
        hidden = self.int_key("n_embd")
        inner = self.cfg.get("n_inner")
        if inner is None:
            self.notes.append(f"{OPTION} {self.path}: n_inner null: the MLP is 4 x n_embd = "
                              f"{4 * hidden} wide (GPT-2's rule)")
            ffn = 4 * hidden
        else:
            ffn = self.int_key("n_inner")
        act = self.cfg.get("activation_function", "gelu_new")
        if not str(act).startswith("gelu"):
            self.warn("activation_function", f"{act!r}: the gpt model's MLP is priced as GELU "
                      "(the same GEMMs; the activation's own cost is not priced)")
        return ModelShape("gpt", self.int_key("n_layer"), hidden, self.int_key("n_head"),
                          ffn=ffn, vocab=self.int_key("vocab_size"),
                          tied_embeddings=bool(self.cfg.get("tie_word_embeddings", True)),
                          max_positions=self.positions("n_positions"))

    def _neox(self) -> None:
        cfg = self.cfg
        if cfg.get("use_parallel_residual", True):
            self.warn("use_parallel_residual", "attention and MLP read the same input in "
                      "GPT-NeoX; the generator writes them one after the other (the same "
                      "FLOPs and bytes, a longer dependency chain)")
        self.warn("rotary_pct", "rotary position embeddings: the gpt model counts a learned "
                  "position table of seq x hidden parameters GPT-NeoX does not have")
        act = cfg.get("hidden_act", "gelu")
        if not str(act).startswith("gelu"):
            self.warn("hidden_act", f"{act!r}: the gpt model's MLP is priced as GELU")

    def _llama_like(self, shape: ModelShape) -> None:
        cfg, fam = self.cfg, self.family
        act = cfg.get("hidden_act", "silu")
        if act not in SILU:
            self.warn("hidden_act", f"{act!r}: the {shape.arch} model's MLP is SwiGLU (SiLU); "
                      "the same GEMMs, a gated GELU's own cost is not priced")
        head_dim = cfg.get("head_dim")
        if head_dim is not None and head_dim != shape.hidden // shape.heads:
            self.warn("head_dim", f"{head_dim}: the generator's heads are hidden / heads = "
                      f"{shape.hidden // shape.heads} wide, so its attention GEMMs differ")
        if fam in ("qwen2", "qwen2_moe"):
            self.warn("attention_bias", "Qwen2's q, k and v projections carry biases; the "
                      f"{shape.arch} model writes none (a few thousand parameters per layer)")
        elif cfg.get("attention_bias"):
            self.warn("attention_bias", f"true: the {shape.arch} model writes no attention "
                      "biases")
        if cfg.get("mlp_bias"):
            self.warn("mlp_bias", f"true: the {shape.arch} model writes no MLP biases")
        window = cfg.get("sliding_window")
        if window is not None and cfg.get("use_sliding_window", True):
            self.warn("sliding_window", f"{window}: attention is priced over the whole causal "
                      f"sequence; with sequences longer than {window} tokens the model attends "
                      "to fewer")
        if "kv_lora_rank" in cfg and cfg.get("kv_lora_rank") is not None:
            self.warn("kv_lora_rank", "multi-head latent attention is priced as grouped-query "
                      "attention of num_key_value_heads heads")

    def _experts(self) -> tuple[int, int, int, int]:
        cfg, fam = self.cfg, self.family
        if fam == "mixtral":
            experts, ffn_key = self.int_key("num_local_experts"), "intermediate_size"
        elif fam.startswith("qwen"):
            experts, ffn_key = self.int_key("num_experts"), "moe_intermediate_size"
        else:
            experts, ffn_key = self.int_key("n_routed_experts"), "moe_intermediate_size"
        topk = self.int_key("num_experts_per_tok")
        ffn = self.int_key(ffn_key)
        # the shared experts every token runs: DeepSeek's n_shared_experts of the routed
        # experts' width, Qwen-MoE's one of shared_expert_intermediate_size (Megatron-LM's
        # --moe-shared-expert-intermediate-size is their total)
        shared = cfg.get("n_shared_experts") or 0
        shared_ffn = shared * ffn
        if cfg.get("shared_expert_intermediate_size"):
            shared_ffn = self.int_key("shared_expert_intermediate_size")
            if fam.startswith("qwen"):
                self.warn("shared_expert_intermediate_size",
                          "Qwen-MoE's sigmoid gate on the shared expert's output (an h x 1 "
                          "linear a token) is not priced")
        dense = cfg.get("first_k_dense_replace") or 0
        if dense:
            width = cfg.get("intermediate_size")
            self.warn("first_k_dense_replace", f"{dense}: the first {dense} layer(s) are dense "
                      f"(an MLP {width} wide) in the model; the generator writes every layer "
                      "with experts")
        freq = cfg.get("moe_layer_freq", 1)
        if freq not in (None, 1):
            self.warn("moe_layer_freq", f"{freq}: experts in every layer are written")
        step = cfg.get("decoder_sparse_step", 1)
        if step not in (None, 1):
            self.warn("decoder_sparse_step", f"{step}: experts in every layer are written")
        if cfg.get("mlp_only_layers"):
            self.warn("mlp_only_layers", f"{cfg['mlp_only_layers']}: experts in every layer "
                      "are written")
        if topk > experts:
            raise ConfigError(f"{OPTION} {self.path}: num_experts_per_tok: expected at most "
                              f"the {experts} experts, found {topk}")
        return experts, topk, ffn, shared_ffn
