"""Readers of the files users already have: a Hugging Face ``config.json``
(:mod:`.hf_config`), a Megatron-LM argument list (:mod:`.megatron_args`) and a torchtitan job
TOML (:mod:`.torchtitan_job`). Each gives the same records (:mod:`.shape`): the model's shape
and, where the file states them, the launch's parallel and batch settings."""
