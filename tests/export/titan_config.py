"""A config registry for torchtitan's ConfigManager in tests/export/test_launch_parsers.py:
torchtitan's own ParallelismConfig and TrainingConfig, without a model (its model registries
import triton, which a CPU machine lacks). Imported only by that test, after torchtitan is
found."""

from dataclasses import dataclass, field

from torchtitan.config.configs import ParallelismConfig, TrainingConfig


@dataclass
class LaunchConfig:
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    hf_assets_path: str = "."


def launch_config() -> LaunchConfig:
    return LaunchConfig()
