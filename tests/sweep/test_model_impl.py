"""`model=hf:<path>` implies `model_impl=hf` (only transformers can build it); a preset
keeps the native model; an explicit `model_impl=native` with an hf: model is refused."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.cli import SWEEPS_DIR
from harness.config import JobConfig, config_from_dict
from harness.validate import validation_errors

HF_MODEL = "hf:sweeps/hf_models/mistral_tiny"


def composed(*overrides: str) -> JobConfig:
    """The job config Hydra composes from sweeps/ for these command-line overrides."""
    with initialize_config_dir(config_dir=str(SWEEPS_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    job = OmegaConf.to_object(cfg)
    assert isinstance(job, JobConfig)
    return job


def test_the_default_is_resolved_from_the_model() -> None:
    assert JobConfig().model_impl == "native"
    assert JobConfig(model=HF_MODEL).model_impl == "hf"
    assert JobConfig(model=HF_MODEL, model_impl="hf").model_impl == "hf"
    assert JobConfig(model="llama_tiny", model_impl="hf").model_impl == "hf"


def test_a_recorded_config_keeps_its_implementation() -> None:
    assert config_from_dict({"model": "llama_tiny", "model_impl": "hf"}).model_impl == "hf"
    assert config_from_dict({"model": HF_MODEL}).model_impl == "hf"


def test_the_command_line_needs_no_model_impl_for_an_hf_model() -> None:
    assert composed().model_impl == "native"
    assert composed("model=llama_mini").model_impl == "native"
    assert composed(f"model={HF_MODEL}").model_impl == "hf"
    assert composed(f"model={HF_MODEL}", "model_impl=hf").model_impl == "hf"


def test_an_explicit_native_implementation_of_an_hf_model_is_refused() -> None:
    pytest.importorskip("transformers")
    job = composed(f"model={HF_MODEL}", "model_impl=native")
    assert job.model_impl == "native"
    (error,) = validation_errors(job)
    assert error == (
        f"model={HF_MODEL!r} is a Hugging Face config, which only transformers can build, "
        "but model_impl=native was given; drop model_impl (an hf: model implies "
        "model_impl=hf), or add model_impl=hf in its place"
    )
    assert validation_errors(composed(f"model={HF_MODEL}", "hardware=cpu")) == []
