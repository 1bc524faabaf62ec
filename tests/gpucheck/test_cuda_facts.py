"""What a GPU result says about where it ran: the card's peak by its full name, NCCL's
version through its own module, and the git revision of a copy without `.git`."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.cuda.nccl as real_nccl

from harness.rank import environment, metrics


@pytest.mark.parametrize(
    "name, tflops",
    [
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),  # the PCIe card of the H200 family, not its SXM peak
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
    ],
)
def test_the_nvl_cards_are_not_taken_for_their_sxm_forms(name: str, tflops: float) -> None:
    assert metrics.spec_peak_flops(name) == tflops * 1e12


def test_nccl_version_is_read_through_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import torch` does not load `torch.cuda.nccl`: only a module that imports it may
    rely on it, whatever else happened to load it first."""
    fake = types.ModuleType("torch.cuda.nccl")
    fake.version = mock.create_autospec(real_nccl.version, return_value=(2, 21, 5))  # type: ignore[attr-defined]
    monkeypatch.delattr(torch.cuda, "nccl", raising=False)
    monkeypatch.setitem(sys.modules, "torch.cuda.nccl", fake)
    monkeypatch.setattr(torch.cuda, "get_device_name", mock.create_autospec(
        torch.cuda.get_device_name, return_value="NVIDIA H200"))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "device_count", mock.create_autospec(
        torch.cuda.device_count, return_value=1))  # fmt: skip
    env = environment.describe_environment(
        device=torch.device("cuda", 0), world_size=1, threads_per_rank=1
    )
    assert env["nccl"] == "2.21.5"
    fake.version.assert_called_once_with()  # type: ignore[attr-defined]


def test_a_copy_without_git_takes_the_revision_passed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy"  # a tree copied to a GPU node: no .git
    copy.mkdir()
    monkeypatch.delenv(environment.REVISION_ENV, raising=False)
    if shutil.which("git"):
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert environment.git_revision(copy) is None
    monkeypatch.setenv(environment.REVISION_ENV, "0123456789ab")
    assert environment.git_revision(copy) == "0123456789ab"
