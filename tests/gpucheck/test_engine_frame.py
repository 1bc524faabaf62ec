"""Check 4's attribution of a snapshot allocation to engine code (frames innermost first)."""

from __future__ import annotations

from harness.gpucheck.snapshot import engine_frame


def _f(filename: str, name: str) -> dict:
    return {"filename": filename, "name": name, "line": 1}


ENGINE = "/x/yafsdp_impl/api.py"
MODEL = "/x/harness/models/llama.py"


def test_engine_code_allocating_is_attributed():
    frames = [_f("/t/torch/functional.py", "zeros"), _f(ENGINE, "_reduce_scatter")]
    assert engine_frame(frames) == "api.py:_reduce_scatter"
    assert engine_frame([_f("/x/yafsdp_impl/buffers.py", "__init__")]) == "buffers.py:__init__"


def test_model_compute_under_engine_frames_is_not():
    # a layer's forward runs inside the engine's checkpoint wrapper: the model frame is nearer
    assert engine_frame([_f(MODEL, "forward"), _f(ENGINE, "_checkpointed")]) is None
    assert engine_frame([_f("/t/torch/checkpoint.py", "f"), _f(ENGINE, "_checkpointed")]) is None
    assert engine_frame([_f("/t/torch/nn.py", "_call_impl"), _f(ENGINE, "__call__")]) is None


def test_no_frames_or_no_engine_frames():
    assert engine_frame([]) is None
    assert engine_frame([_f("/t/torch/optim/adamw.py", "step")]) is None
