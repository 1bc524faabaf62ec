"""Check 4's attribution of a snapshot allocation to engine code (frames innermost first)."""

from __future__ import annotations

from harness.gpucheck.snapshot import SCALAR_BYTES, engine_frame, steady_offenders


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


def test_steady_offenders_are_engine_allocations_above_a_scalar():
    grad_copy = _f(ENGINE, "_add_into_master_grad")
    trace = [
        {"action": "alloc", "size": SCALAR_BYTES, "frames": [_f(ENGINE, "clip_grad_norm_")]},
        {"action": "alloc", "size": 8 << 20, "frames": [grad_copy]},
        {"action": "free_requested", "size": 8 << 20, "frames": [_f(ENGINE, "release")]},
        {"action": "alloc", "size": 8 << 20, "frames": [_f(MODEL, "forward"), grad_copy]},
    ]
    assert steady_offenders(trace) == ["api.py:_add_into_master_grad"]
    assert steady_offenders(trace[:1] + trace[2:]) == []
