"""The profiled pass asks for CUDA sync events on CUDA only, and the result records it."""

import pytest
import torch

import harness.rank.profiling as profiling
from harness.config import ProfileConfig
from harness.jobdir.result import Profile


class _Recorded(Exception):
    pass


@pytest.mark.parametrize(
    ("use_cuda", "flag", "asked"), [(True, True, True), (True, False, False), (False, True, False)]
)
def test_sync_events_are_asked_for_on_cuda_only(tmp_path, monkeypatch, use_cuda, flag, asked):
    seen = {}

    def fake_profile(**kwargs):
        seen.update(kwargs)
        raise _Recorded

    monkeypatch.setattr(profiling, "profile", fake_profile)
    with pytest.raises(_Recorded):
        profiling.capture_profile(
            lambda i: None, steps=1, warmup=1, out_dir=tmp_path, rank=0, world_size=1,
            use_cuda=use_cuda, cuda_sync_events=flag,
        )  # fmt: skip
    config = seen["experimental_config"]
    assert (config is not None) == asked
    if asked:
        assert isinstance(config, torch.profiler._ExperimentalConfig)


def test_on_by_default_and_kept_in_the_result():
    assert ProfileConfig().cuda_sync_events is True
    record = Profile.from_dict({"traces": ["traces/rank0.json.gz"], "cuda_sync_events": True})
    assert record.to_dict()["cuda_sync_events"] is True
