"""engine=ya_fsdp: the upstream YaFSDP library trains to the unsharded reference's losses and
grad norms (fp32 with and without checkpointing, bf16, accumulation; 2 and 3 ranks), with
gloo's version-counter wrapper on, and refuses what it cannot run.

CI does not install the library (it is not on PyPI; `yandex-ya-fsdp` there is a
placeholder), so the training tests skip there; they run wherever `ya_fsdp` is importable
(README: "Upstream YaFSDP")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.config import JobConfig
from harness.engines.registry import ENGINES, REFERENCE
from tests.distributed import run_on_ranks
from tests.rank.training import short_job, train_jobs

CLIP = 0.5
RTOL = {"fp32": 1e-5, "bf16": 1e-2}  # as tests/engines/test_parity.py's grad norms


def test_ya_fsdp_refuses_the_for_loop_adamw_and_says_how_to_install() -> None:
    from harness.engines.upstream import INSTALL, available
    from harness.validate import validation_errors

    errors = validation_errors(JobConfig(engine=ENGINES["ya_fsdp"].config(), adamw_impl="for-loop"))
    assert any("adamw_impl=for-loop" in e and "lerp_" in e for e in errors)
    assert any(INSTALL in e for e in errors) != available()
    assert "git+https://github.com/yandex/YaFSDP@" in INSTALL and "yandex-ya-fsdp" not in INSTALL


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_ya_fsdp_matches_the_reference(world_size: int, tmp_path: Path) -> None:
    pytest.importorskip(
        "ya_fsdp", reason="upstream YaFSDP is not installed (not on PyPI; see the README)"
    )
    cases = [("fp32", 0, 1), ("fp32", 1, 1), ("bf16", 0, 1), ("fp32", 0, 2)]
    configs = [
        short_job(
            label,
            world_size,
            seq_len=64,
            dtype=d,
            ckpt_layers=c,
            grad_accum=a,
            steps=3,
            clip_grad_norm=CLIP,
        )  # fmt: skip
        for d, c, a in cases
        for label in (REFERENCE, "ya_fsdp")
    ]
    rank0 = run_on_ranks(train_jobs, world_size, configs, str(tmp_path))[0]
    for i, (dtype, ckpt, accum) in enumerate(cases):
        (reference, _), (got, settings) = rank0[2 * i], rank0[2 * i + 1]
        assert min(reference["grad_norms"]) > CLIP, "clipping must be active to mean much"
        assert settings["gloo_version_counter_wrapper"] is True
        where = f"ya_fsdp {dtype} ckpt={ckpt} grad_accum={accum} at {world_size} ranks"
        for key in ("losses", "grad_norms"):
            torch.testing.assert_close(
                torch.tensor(got[key], dtype=torch.float64),
                torch.tensor(reference[key], dtype=torch.float64),
                rtol=RTOL[dtype],
                atol=0,
                msg=lambda m, w=where, k=key: f"{w}, {k}: {m}",
            )


def test_a_ya_fsdp_that_fails_to_import_is_refused_at_the_pre_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import sys

    from harness.engines import upstream
    from harness.validate import validation_errors

    broken = tmp_path / "ya_fsdp"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        "raise ImportError('ya_fsdp/_C.so: undefined symbol: _ZN3c1017RegisterOperators')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    upstream.import_problem.cache_clear()  # this process may have asked before
    errors = validation_errors(JobConfig(engine=ENGINES["ya_fsdp"].config()))
    upstream.import_problem.cache_clear()  # the next test asks of the real one
    hits = [e for e in errors if "engine=ya_fsdp" in e and "undefined symbol" in e]
    assert hits and upstream.INSTALL in hits[0], errors
