"""Hugging Face transformers causal LMs as the model (`model_impl=hf`).

A preset (`model=llama2_7b`) becomes `LlamaForCausalLM` from a `LlamaConfig` with the
preset's shapes; `model=hf:<path>` reads a local config.json of any causal LM whose
decoder layers sit at `model.layers` (Llama, Mistral, Qwen2 and their kin). Nothing is ever
downloaded. Models are built with their parameters on the meta device and SDPA attention.

transformers is imported inside the functions, only when an HF model is asked for, so the
rest of the harness runs without it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from harness.models.presets import HF_CONFIG_PREFIX, ModelShape, config_path, get_shape
from harness.models.unit_names import HF

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ATTENTION = "sdpa"
# Where the harness finds the parts every engine shards, as Llama-style HF models name them
# (the units' paths, which name them in every trace and plan, are `unit_names.HF`).
EMBED, LAYERS, HEAD = HF
NORM = "model.norm"
INSTALL_HINT = "pip install 'transformers>=4.48,<6'"


class HFModelError(ValueError):
    """A config the harness cannot train; the message (to follow `model=<value>: `) names
    what is missing and the fix."""


def transformers_missing() -> str | None:
    """Why an HF model cannot be built here, or None when transformers imports."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return f"model_impl=hf needs the transformers package, not installed here: {INSTALL_HINT}"
    return None


def llama_config(shape: ModelShape) -> PretrainedConfig:
    """A `LlamaConfig` with the preset's shapes: the model the native Llama reimplements."""
    from transformers import LlamaConfig

    # transformers 5 takes rope_theta as a legacy keyword and files it in rope_parameters
    fields: dict[str, Any] = dict(
        vocab_size=shape.vocab_size,
        hidden_size=shape.dim,
        intermediate_size=shape.ffn_dim,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_kv_heads,
        rope_theta=shape.rope_theta,
        rms_norm_eps=shape.norm_eps,
        max_position_embeddings=shape.max_seq_len,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    return LlamaConfig(**fields)


def read_config(model: str) -> PretrainedConfig:
    """The transformers config of `model=hf:<path>`, refused unless it is a causal LM."""
    path = config_path(model)
    if not path.is_file():
        raise HFModelError(
            f"no file {path}. The harness never downloads from a hub: give a "
            f"path to a config.json, e.g. model=hf:/models/Llama-2-7b-hf/config.json"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise HFModelError(f"{path} is not readable JSON ({e})") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise HFModelError(f"{path} has no `model_type`; give a transformers config.json")
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = data["model_type"]
    if model_type not in CONFIG_MAPPING:
        raise HFModelError(
            f"model_type={model_type!r} is unknown to the installed "
            f"transformers; upgrade it ({INSTALL_HINT}) or give another config"
        )
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise HFModelError(
            f"model_type={model_type!r} has no causal-LM class in "
            "transformers (an encoder-only or encoder-decoder model); give a decoder-only "
            "causal LM config (Llama, Mistral, Qwen2, ...)"
        )
    _check_sizes(data, path)
    try:  # transformers' own checks: field types (strict configs, 5.x), then `validate()`
        config = CONFIG_MAPPING[model_type].from_dict(data)
        if callable(getattr(config, "validate", None)):  # transformers 4.x has none
            config.validate()
    except Exception as e:
        raise HFModelError(f"{path}: transformers refused it: {e}") from None
    return config


# The sizes the harness and every Llama-style model divide by or build from. transformers
# checks their types but not their values: a 0 head count ends in a ZeroDivisionError.
SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim",
               "max_position_embeddings")  # fmt: skip


def _check_sizes(data: dict[str, Any], path: Path) -> None:
    for field in SIZE_FIELDS:
        value = data.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise HFModelError(f"{path}: {field}={value} must be at least 1")
    heads, kv_heads = data.get("num_attention_heads"), data.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv_heads, int) and heads % kv_heads:
        raise HFModelError(
            f"{path}: num_attention_heads={heads} is not a multiple of "
            f"num_key_value_heads={kv_heads} (each key/value head serves a group of query "
            "heads); give a divisor of it"
        )


def hf_config(model: str) -> PretrainedConfig:
    """The config of a preset (as a LlamaConfig) or of `hf:<path>`."""
    if model.startswith(HF_CONFIG_PREFIX):
        return read_config(model)
    return llama_config(get_shape(model))


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Put every parameter registered inside on the meta device, leaving buffers real.

    Buffers (the rotary `inv_freq`) are computed in the constructor and no engine
    initialises them, so they must exist with their values; parameters are filled by each
    engine from `harness.models.init_weights`. (accelerate's `init_empty_weights` does the same.)
    """
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:
            meta = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            module._parameters[name] = meta

    nn.Module.register_parameter = on_meta  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def build_hf_model(config: PretrainedConfig) -> nn.Module:
    """The causal LM of `config`: fp32 parameters on meta, buffers on CPU, SDPA attention,
    no KV cache (training). Refused unless its parts sit where the engines look for them."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(config)
    config.use_cache = False
    with _parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTENTION)
    model.float()  # a config's `torch_dtype` must not decide: engines cast from fp32
    missing = missing_parts(model)
    if missing:
        stacks = [n for n, m in model.named_modules() if isinstance(m, nn.ModuleList)]
        raise HFModelError(
            f"{type(model).__name__} has no {', '.join(missing)}; the harness shards "
            f"decoder-only models with {EMBED}, {LAYERS}, {NORM} and {HEAD} (Llama, "
            f"Mistral, Qwen2 and their kin). Its layer stacks: {', '.join(stacks) or 'none'}"
        )
    return model


def missing_parts(model: nn.Module) -> list[str]:
    """The parts of a Llama-style causal LM that `model` lacks."""
    missing = []
    for path in (EMBED, LAYERS, NORM, HEAD):
        found = _get(model, path)
        if found is None or (path == LAYERS and not isinstance(found, nn.ModuleList)):
            missing.append(path)
    return missing


def _get(module: nn.Module, path: str) -> Any:
    found: Any = module
    for part in path.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def tied_embeddings(model: nn.Module) -> bool:
    return _get(model, HEAD).weight is _get(model, EMBED).weight


def hf_shape(name: str, config: PretrainedConfig, model: nn.Module) -> ModelShape:
    """The config's shapes as a ModelShape (data, validation, FLOPs), with the parameter
    count made exact from the built model (biases, a head_dim of its own)."""
    rope = getattr(config, "rope_parameters", None) or {}
    n_heads = config.num_attention_heads
    shape = ModelShape(
        name=name,
        dim=config.hidden_size,
        n_layers=config.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=getattr(config, "num_key_value_heads", None) or n_heads,
        ffn_dim=config.intermediate_size,
        vocab_size=config.vocab_size,
        rope_theta=float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))),
        norm_eps=float(getattr(config, "rms_norm_eps", 1e-5)),
        max_seq_len=config.max_position_embeddings,
        tied_embeddings=tied_embeddings(model),
    )
    layer = sum(p.numel() for p in _get(model, LAYERS)[0].parameters())
    extra = layer - shape.layer_params()
    return ModelShape(**{**_fields(shape), "extra_layer_params": extra})


def _fields(shape: ModelShape) -> dict[str, Any]:
    return {f: getattr(shape, f) for f in shape.__dataclass_fields__}


def hf_parts(model: nn.Module) -> tuple[nn.Module, nn.ModuleList, nn.Module, nn.Module]:
    """(token embedding, decoder layers, final norm, output projection)."""
    embed, layers, norm, head = (_get(model, p) for p in (EMBED, LAYERS, NORM, HEAD))
    return embed, layers, norm, head


@functools.lru_cache(maxsize=16)
def config_shape(model: str) -> ModelShape:
    """The shapes of `model` (a preset or hf:<path>) as its Hugging Face model has them,
    from a one-layer build on meta (the parameter count of a layer is exact)."""
    config = hf_config(model)
    one_layer = copy.deepcopy(config)
    one_layer.num_hidden_layers = 1
    return hf_shape(model, config, build_hf_model(one_layer))
