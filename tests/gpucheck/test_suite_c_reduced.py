"""Suite C at its reduced size on CPU: one rank of llama_small at 8 and 64 fake ranks,
every engine's bytes by class equal to the arithmetic."""

from __future__ import annotations

import pytest
import torch

from harness.gpucheck import suite_c
from harness.gpucheck.check_rows import PASS


@pytest.fixture(scope="module")
def rows():
    return suite_c.run(torch.device("cpu"), reduced=True)


def test_every_engine_at_both_world_sizes_then_the_pressure_rows(rows):
    assert [r.check for r in rows] == [
        f"8 llama_small_g{p}_s4_c1 {e}" for p in (8, 64) for e in ("yafsdp", "fsdp1", "fsdp2")
    ] + [
        f"8 pressure llama_small_x2_g8_s4 {e}"
        for e in ("fsdp1", "fsdp2", *(f"yafsdp:{plan}" for plan in suite_c.PRESSURE_PLANS))
    ]


def test_each_pressure_row_holds_its_plan_as_the_arithmetic_says(rows):
    """Every yafsdp plan is built and stepped at the pressure point and holds exactly
    footprint's bytes for that plan (the bytes check passes only for the plan named)."""
    plans = {r.check.rsplit(":", 1)[1]: r.figures.get("buffer_plan") for r in rows
             if "pressure" in r.check and ":" in r.check}  # fmt: skip
    assert plans == {p: p for p in suite_c.PRESSURE_PLANS}


def test_the_cap_holds_a_larger_card_to_80_gib_and_is_restored(monkeypatch):
    calls = []
    props = type("Props", (), {"total_memory": 160 * 2**30})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda f, device: calls.append(f))  # fmt: skip
    with suite_c.capped(torch.device("cuda", 0)) as fraction:
        assert fraction == 0.5 and calls == [0.5]
    assert calls == [0.5, 1.0]
    props.total_memory = 80 * 2**30
    with suite_c.capped(torch.device("cuda", 0)) as fraction:
        assert fraction is None
    with suite_c.capped(torch.device("cpu")) as fraction:
        assert fraction is None
    assert calls == [0.5, 1.0]


def test_bytes_by_class_match_the_arithmetic(rows):
    failed = [f"{r.check}: {r.result} {r.detail}" for r in rows if r.result != PASS]
    assert not failed, failed


def test_sharded_state_shrinks_with_the_world(rows):
    by = {r.check: r.figures for r in rows}
    for engine, key in (("yafsdp", "master_mib"), ("fsdp1", "params_mib"), ("fsdp2", "params_mib")):
        small = by[f"8 llama_small_g8_s4_c1 {engine}"][key]
        large = by[f"8 llama_small_g64_s4_c1 {engine}"][key]
        assert large == pytest.approx(small / 8, rel=0.01), engine


def test_a_point_that_does_not_fit_is_a_skipped_row(monkeypatch):
    def too_big(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(suite_c, "build", too_big)
    point = suite_c.Point("huge", "llama2_70b", 256, 4096, 50)
    verdict = suite_c.measure(point, "fsdp1", torch.device("cpu"))
    assert verdict.skipped and verdict.figures == {"fits_lent_gpu": False, "oom_in": "build"}
    assert "does not fit" in verdict.detail
    assert not torch.distributed.is_initialized()  # the fake group is gone for the next row
