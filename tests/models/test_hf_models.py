"""Hugging Face models as the model source: the native Llama is the same model as HF's
`LlamaForCausalLM`, and configs the harness cannot train are refused before launch."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.models.build import build_job_model, restore_buffers, snapshot_buffers
from harness.models.init_weights import init_weights
from harness.models.llama import build_model
from harness.models.shapes import ModelShape, get_shape
from harness.validate import validation_errors
from tests.models.hf_configs import BERT, GPT2, LLAMA, QWEN2, TIED_LLAMA, write_config

pytest.importorskip("transformers")

SHAPE = ModelShape(
    name="two_layers", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab_size=256
)


def _rotary_to_half_split(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reorder q/k projection rows from the native Llama's RoPE layout to HF's.

    The native model (as Meta's reference code) rotates interleaved channel pairs
    (0,1), (2,3), ... of each head; HF's `rotate_half` rotates channel i with i + head_dim/2.
    The same model in HF's layout has each head's rows reordered: evens first, then odds
    (what transformers' convert_llama_weights_to_hf.py `permute` does).
    """
    out_dim, in_dim = weight.shape
    per_head = weight.view(n_heads, out_dim // n_heads // 2, 2, in_dim)
    return per_head.transpose(1, 2).reshape(out_dim, in_dim)


def _hf_state_dict(native: dict[str, torch.Tensor], *, permute: bool = True) -> dict:
    """The native Llama's weights under HF's names (and RoPE layout, unless permute=False)."""
    names = {
        "attention.wq": "self_attn.q_proj",
        "attention.wk": "self_attn.k_proj",
        "attention.wv": "self_attn.v_proj",
        "attention.wo": "self_attn.o_proj",
        "feed_forward.w1": "mlp.gate_proj",
        "feed_forward.w3": "mlp.up_proj",
        "feed_forward.w2": "mlp.down_proj",
        "attention_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }
    out = {
        "model.embed_tokens.weight": native["tok_embeddings.weight"],
        "model.norm.weight": native["norm.weight"],
        "lm_head.weight": native["output.weight"],
    }
    for i in range(SHAPE.n_layers):
        for ours, theirs in names.items():
            value = native[f"layers.{i}.{ours}.weight"]
            if permute and ours in ("attention.wq", "attention.wk"):
                heads = SHAPE.n_heads if ours == "attention.wq" else SHAPE.n_kv_heads
                value = _rotary_to_half_split(value, heads)
            out[f"model.layers.{i}.{theirs}.weight"] = value
    return out


def _logits_pair(dtype: torch.dtype, *, permute: bool = True) -> tuple[torch.Tensor, ...]:
    from harness.models.hf import build_hf_model, llama_config

    native = build_model(SHAPE, device="cpu")
    init_weights(native, seed=0)
    # Random weights of std 0.02 make attention nearly uniform, where positions (and so
    # RoPE) hardly matter: sharpen it with larger q/k weights, and give the norms non-unit
    # scales, so that a misplaced rotation or norm weight shows.
    with torch.no_grad():
        for name, param in native.named_parameters():
            if name.endswith(("wq.weight", "wk.weight")):
                param.mul_(10)
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    hf = build_hf_model(llama_config(SHAPE))
    buffers = snapshot_buffers(hf)
    hf.to_empty(device="cpu")
    hf.load_state_dict(_hf_state_dict(native.state_dict(), permute=permute), strict=True)
    restore_buffers(hf, buffers, torch.device("cpu"))
    native.to(dtype)
    hf.to(dtype)
    restore_buffers(hf, buffers, torch.device("cpu"))  # rotary frequencies stay fp32
    tokens = torch.randint(0, SHAPE.vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return native(tokens).float(), hf(tokens).logits.float()


def test_native_and_hf_llama_give_the_same_logits() -> None:
    ours, theirs = _logits_pair(torch.float32)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
    # In bf16 the two round differently (HF applies RoPE in bf16, the native model in
    # fp32): equal within a few bf16 roundings (2^-8 each) of the logits' scale.
    ours, theirs = _logits_pair(torch.bfloat16)
    bf16_tolerance = 8 * 2**-8 * ours.abs().max().item()
    torch.testing.assert_close(theirs, ours, rtol=0, atol=bf16_tolerance)
    # Without the RoPE permutation they are different models, far outside that tolerance.
    ours, unpermuted = _logits_pair(torch.float32, permute=False)
    assert (unpermuted - ours).abs().max().item() > 10 * bf16_tolerance


def test_hf_preset_has_the_native_shapes_and_flops() -> None:
    for name in ("llama_tiny", "llama3_8b"):
        _, shape = build_job_model(name, "hf")
        native = get_shape(name)
        assert shape.num_params() == native.num_params()
        assert shape.flops_per_token(2048) == native.flops_per_token(2048)


def test_qwen2_biases_count_in_params_and_flops(tmp_path: Path) -> None:
    model, shape = build_job_model(write_config(tmp_path, "qwen2", QWEN2), "hf")
    assert shape.num_params() == sum(p.numel() for p in model.parameters())
    q_k_v_biases = 64 + 2 * 32  # hidden + 2 x (kv heads x head_dim)
    assert shape.extra_layer_params == q_k_v_biases


def _errors(tmp_path: Path, model: str, engine: str = "yafsdp", impl: str = "hf") -> str:
    cfg = JobConfig(model=model, model_impl=impl, engine=ENGINES[engine].config(), gpus=2)
    return "\n".join(validation_errors(cfg))


def test_a_good_hf_config_is_accepted(tmp_path: Path) -> None:
    assert _errors(tmp_path, write_config(tmp_path, "llama", LLAMA)) == ""
    assert _errors(tmp_path, "llama2_7b") == ""  # a preset, built as LlamaForCausalLM


def test_refuses_an_encoder_only_config(tmp_path: Path) -> None:
    error = _errors(tmp_path, write_config(tmp_path, "bert", BERT))
    assert "model='hf:" in error and "model.layers" in error
    assert "bert.encoder.layer" in error  # where its layers are instead


def test_refuses_a_config_without_model_layers(tmp_path: Path) -> None:
    error = _errors(tmp_path, write_config(tmp_path, "gpt2", GPT2))
    assert "GPT2LMHeadModel has no model.embed_tokens, model.layers, model.norm" in error
    assert "transformer.h" in error


def test_refuses_a_hub_name_with_the_fix(tmp_path: Path) -> None:
    error = _errors(tmp_path, "hf:meta-llama/Llama-2-7b-hf", engine="fsdp2")
    assert "never downloads from a hub" in error and "give a path to a config.json" in error


def test_refuses_tied_embeddings_with_yafsdp(tmp_path: Path) -> None:
    error = _errors(tmp_path, write_config(tmp_path, "tied", TIED_LLAMA))
    assert "tie_word_embeddings" in error and "engine=yafsdp" in error
    assert '"tie_word_embeddings": false' in error


def test_refuses_an_hf_config_with_the_native_implementation(tmp_path: Path) -> None:
    error = _errors(tmp_path, write_config(tmp_path, "llama", LLAMA), impl="native")
    assert "add model_impl=hf" in error
    assert "model_impl='nope' is unknown" in _errors(tmp_path, "llama_tiny", impl="nope")


def test_a_result_from_before_model_impl_stands_for_native_only() -> None:
    from dataclasses import asdict

    from harness.job.resume import config_differences
    from harness.jobdir.result import Result

    config = asdict(JobConfig())
    del config["model_impl"]
    older = Result(status="ok", config=config)
    assert config_differences(older, asdict(JobConfig(model_impl="native"))) == []
    hf = config_differences(older, asdict(JobConfig(model_impl="hf")))
    assert hf == ["model_impl: 'native' -> 'hf'"]


def test_without_transformers_only_hf_jobs_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    assert validation_errors(JobConfig(model="llama_tiny")) == []
    errors = validation_errors(JobConfig(model="llama_tiny", model_impl="hf"))
    assert errors == [
        "model_impl=hf needs the transformers package, not installed here: "
        "pip install 'transformers>=4.48,<6'"
    ]


def test_an_edited_hf_config_is_measured_again(tmp_path, monkeypatch):
    """The job directory names the config.json's path; what the file says is recorded too,
    so an edit (another layer count) is a config change and the old result is set aside."""
    import harness.job.launch
    from harness.job import run
    from harness.jobdir.result import make_result, read_result, write_result

    model = write_config(tmp_path, "tiny", LLAMA)
    cfg = JobConfig(model=model, device="cpu", gpus=1, steps=1, warmup_steps=1)
    job_dir = tmp_path / "job"
    launched = []

    def fake_launch(cfg, job_dir, *, on_poll=None):  # stands for the ranks' measurement
        launched.append(cfg)
        write_result(job_dir, make_result(status="ok", config=asdict(cfg)))
        return 0, False

    monkeypatch.setattr(harness.job.launch, "launch_local", fake_launch)
    monkeypatch.setattr(run, "decide_result", lambda cfg, job_dir, **kw: read_result(
        job_dir / "result.json"))  # fmt: skip
    said: list[str] = []
    assert run.run_job(cfg, job_dir, say=said.append).ran
    assert not run.run_job(cfg, job_dir, say=said.append).ran  # unchanged: it stands
    config_json = Path(model.removeprefix("hf:"))
    config_json.write_text(json.dumps({**LLAMA, "num_hidden_layers": 3}))
    assert run.run_job(cfg, job_dir, say=said.append).ran, said
    assert "model_config_sha256" in said[-1]
    assert len(launched) == 2
    # a result recorded before the hash was kept still stands for its job (and reads)
    old = read_result(job_dir / "result.json")
    old.config.pop("model_config_sha256")
    write_result(job_dir, old)
    assert not run.run_job(cfg, job_dir, say=said.append).ran
