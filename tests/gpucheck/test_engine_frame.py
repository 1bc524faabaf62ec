"""Check 4's attribution of a snapshot allocation to engine code (frames innermost first)."""

from __future__ import annotations

from harness.gpucheck.judging import SCALAR_BYTES, engine_frame, steady_offenders


def _f(filename: str, name: str) -> dict:
    return {"filename": filename, "name": name, "line": 1}


ENGINE = "/x/yafsdp_impl/_api.py"
MODEL = "/x/harness/models/llama.py"


def test_engine_code_allocating_is_attributed():
    frames = [_f("/t/torch/functional.py", "zeros"), _f(ENGINE, "_reduce_scatter")]
    assert engine_frame(frames) == "_api.py:_reduce_scatter"
    assert engine_frame([_f("/x/yafsdp_impl/_buffers.py", "__init__")]) == "_buffers.py:__init__"


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
    assert steady_offenders(trace) == ["_api.py:_add_into_master_grad"]
    assert steady_offenders(trace[:1] + trace[2:]) == []


def test_check_4_counts_the_file_that_holds_the_engine_buffers():
    """Check 4 sums the live blocks attributed to the file `BUFFERS_FILE` names: the engine
    file where `Buffers` allocates, whatever the engine's modules are called."""
    import inspect

    from harness.gpucheck.suite_a import BUFFERS_FILE
    from yafsdp_impl import Buffers

    frame = _f(inspect.getsourcefile(Buffers) or "", "__init__")
    assert engine_frame([frame]) == f"{BUFFERS_FILE}:__init__"
