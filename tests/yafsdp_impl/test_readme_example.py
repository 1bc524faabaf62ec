"""The usage example in yafsdp_impl/README.md runs as written, on 2 gloo ranks.

The README's python block is executed verbatim after a preamble that defines what it
leaves to the reader (`MyModel`, `batches`); each rank prints its losses, which must be
finite, one per batch, and fall as the model learns the two batches it sees four times.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.distributed import free_port

REPO = Path(__file__).resolve().parents[2]
PREAMBLE = """
import torch
from torch import nn


class MyModel(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, depth: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same weights on every rank
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU()) for _ in range(depth)
        )
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


_gen = torch.Generator().manual_seed(int(__import__("os").environ["RANK"]))
_data = [torch.randint(0, 64, (2, 17), generator=_gen) for _ in range(2)]
batches = [(d[:, :-1], d[:, 1:]) for d in _data * 4]
"""
EPILOGUE = """
print("LOSSES " + __import__("json").dumps(_losses))
"""


def readme_example() -> str:
    text = (REPO / "yafsdp_impl" / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "expected one python example in yafsdp_impl/README.md"
    return blocks[0]


def test_readme_example_trains_on_two_ranks(tmp_path: Path) -> None:
    example = readme_example()
    # Record each step's loss without changing the example's own lines.
    recorded = example.replace(
        "    loss.backward()", "    _losses.append(loss.item())\n    loss.backward()"
    )
    assert recorded != example, "the README example no longer calls loss.backward()"
    script = tmp_path / "example.py"
    script.write_text(PREAMBLE + "_losses = []\n" + recorded + EPILOGUE)
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
    for rank, proc in enumerate(procs):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"rank {rank}:\n{err[-3000:]}"
        losses = json.loads(out.split("LOSSES ", 1)[1])
        assert len(losses) == 8 and all(x == x and abs(x) < 1e3 for x in losses)
        print(f"rank {rank} losses: {losses}")
        # batches alternate A, B, A, B, ...: each falls by the time it is seen a fourth time
        assert losses[6] < losses[0] and losses[7] < losses[1]
