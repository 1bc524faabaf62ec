"""No engine's step would make the host wait for a CUDA device: forward, backward, the
reduction, clipping and the optimizer step of every engine the harness owns, one rank of a
fake process group, watched by `tests.host_syncs.HostSyncs`."""

from __future__ import annotations

import pytest
import torch

from harness.models.presets import ModelShape
from harness.rank.session import Session
from tests.host_syncs import HostSyncs, optimizer_step_counters
from tests.plan.engine_capture import fake_world, job

WORLD = 2
OWN_ENGINES = ("yafsdp", "fsdp1", "fsdp2", "fsdp2_tuned", "local")
# Smaller than llama_tiny: what is checked is which ops run, not their cost.
SHAPE = ModelShape(name="llama_host_syncs", dim=32, n_layers=2, n_heads=2, n_kv_heads=1,
                   ffn_dim=64, vocab_size=128, max_seq_len=64)  # fmt: skip


def _step_syncs(label: str, **fields: object) -> list[str]:
    """The host syncs of the second step (the first builds the optimizer's state)."""
    with fake_world(WORLD):
        cfg = job(label, WORLD, clip_grad_norm=1.0, seq_len=16, **fields)
        session = Session.build(cfg, 0, WORLD, torch.device("cpu"), shape=SHAPE)
        gen = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, session.shape.vocab_size, (cfg.micro_batch, cfg.seq_len),
                               generator=gen)  # fmt: skip
        session.step_on(lambda micro: (tokens, tokens))
        with HostSyncs(exempt=lambda: optimizer_step_counters(session.optimizer)) as syncs:
            session.step_on(lambda micro: (tokens, tokens))
    return [str(s) for s in syncs.found]


@pytest.mark.parametrize(
    ("label", "adamw_impl"),
    # fused: the default; foreach reads its host-side step counters (exempt, not a sync)
    [(label, "fused") for label in OWN_ENGINES] + [("yafsdp", "foreach")],
)
def test_no_engine_step_waits_on_the_device(label: str, adamw_impl: str) -> None:
    assert _step_syncs(label, adamw_impl=adamw_impl, grad_accum=2) == []


def test_a_norm_read_on_the_host_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check sees through the harness's step: clipping that reads its norm back (as a
    log line might) is reported where it happens."""
    import harness.rank.train_step as train_step

    real = train_step.clip_and_step

    def reads_the_norm(*args: object, **kwargs: object) -> torch.Tensor | None:
        norm = real(*args, **kwargs)  # type: ignore[arg-type]
        if norm is not None and float(norm) > 1e9:
            raise AssertionError("unreachable: a finite norm")
        return norm

    monkeypatch.setattr(train_step, "clip_and_step", reads_the_norm)
    found = _step_syncs("local", adamw_impl="fused")
    assert len(found) == 1 and "_local_scalar_dense" in found[0], found
    assert "test_engine_host_syncs.py" in found[0]


def test_every_kind_of_host_read_is_caught() -> None:
    t = torch.arange(6.0)
    with HostSyncs() as syncs:
        t.sum().item()
        bool(t[0])
        t.tolist()
        t.cpu()
        t.to("cpu")
        t.to(torch.float64)  # not a copy to the host
        t.nonzero()
        t.masked_select(t > 2)
        torch.repeat_interleave(t, torch.tensor([1, 2, 1, 1, 1, 1]))
        torch.repeat_interleave(t, torch.tensor([1, 2, 1, 1, 1, 1]), output_size=7)  # no
        torch.unique(t)
        torch.equal(t, t)
    what = [s.what for s in syncs.found]
    assert what == [
        "aten._local_scalar_dense.default",
        "aten._local_scalar_dense.default",  # bool()
        "Tensor.tolist",
        "Tensor.cpu",
        "Tensor.to",
        "aten.nonzero.default",
        "aten.masked_select.default",
        "aten.repeat_interleave.Tensor",
        "aten._unique2.default",
        "aten.equal.default",
    ], what
    assert not {"tolist", "cpu", "to"} & set(vars(torch.Tensor))  # the methods put back


def test_host_counters_are_exempt_and_nothing_else() -> None:
    counter, weights = torch.tensor(3.0), torch.ones(2)
    with HostSyncs(exempt=lambda: [counter]) as syncs:
        counter.item()
        weights.sum().item()
    assert [s.what for s in syncs.found] == ["aten._local_scalar_dense.default"]
