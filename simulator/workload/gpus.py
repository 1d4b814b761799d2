"""GPU presets for the workload generator: the name, dense BF16 peak and an end-to-end fraction.

``pipesim generate`` times rows with the kernel-level model (:mod:`.kernels`, constants in
:mod:`.kernel_presets`, keyed by the same names). What is here serves the flat model that
``--efficiency F`` asks for (every row's FLOPs over F x the peak) and callers of
:meth:`GPUPreset.time_ns`. Peaks are NVIDIA's datasheet numbers for dense BF16 tensor-core math
(the "with sparsity" figures are twice these). ``efficiency`` is what large published training
runs sustained end to end (model FLOPs utilisation, bubbles and communication included, so not
a kernel's fraction):

- A100 SXM: 312 TFLOPS. Megatron-LM trained GPT-3 175B at 163 TFLOPS per GPU on 3072 A100s,
  52% of peak (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC'21) -> 0.50.
- H100 SXM: 989 TFLOPS. Llama 3 405B trained at 38-43% BF16 MFU on 16K H100s (Meta, "The Llama
  3 Herd of Models", 2024) -> 0.40.
- H200 SXM: the H100's compute die with more, faster HBM: 989 TFLOPS, 0.40.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError


# a NamedTuple, not a dataclass: the system's config reads the names on the run path (start-up)
class GPUPreset(NamedTuple):
    key: str
    name: str
    peak_bf16_tflops: float   # dense
    efficiency: float         # achieved fraction of peak

    def time_ns(self, flops: float, efficiency: float | None = None) -> int:
        """Roofline compute time: FLOPs / (peak x efficiency), rounded to whole ns."""
        eff = self.efficiency if efficiency is None else efficiency
        return round(flops / (self.peak_bf16_tflops * 1e3 * eff))


GPUS: dict[str, GPUPreset] = {
    "a100": GPUPreset("a100", "NVIDIA A100 SXM", 312.0, 0.50),
    "h100": GPUPreset("h100", "NVIDIA H100 SXM", 989.0, 0.40),
    "h200": GPUPreset("h200", "NVIDIA H200 SXM", 989.0, 0.40),
}


def gpu_preset(key: str) -> GPUPreset:
    preset = GPUS.get(key.lower())
    if preset is None:
        raise ConfigError(f"--gpu: expected one of {', '.join(GPUS)}, found {key!r}")
    return preset
