"""`python -m harness.plan.probe give-way`: the give-way rules measured on one CUDA GPU.

What it runs, per distinct GEMM shape of one block's backward (the model's own shapes, from
the planner's kernel census at `--seq-len` and `--micro-batch`; 8 for Llama 2 34B/70B):
- on a compute stream at priority 0, that GEMM back to back (bf16, `torch.mm`);
- on a side stream, a spin kernel (`torch.cuda._sleep`) whose end falls at a chosen phase
  of the GEMMs, then the side work, which becomes ready at that moment:
  - `chain`: FSDP1's gradient preparation at the size of one block's flat gradient: a
    bf16 -> fp32 cast (`copy_`, split in two launches past 2**31 bytes) and an in-place
    divide (`div_`);
  - `collective`: a copy kernel standing in for a collective: `--channels` blocks of 512
    threads, as NCCL runs one block per channel (Triton);
- each side at stream priority 0 and at -1: 4 sessions per shape, `--trials` phases each;
  the kernels each trial's side work launched are counted too (a cast or divide of more
  than 2**31 bytes launches twice: 34B's and 70B's fp32 gradients).
What it measures: torch.profiler traces every kernel; `give_way_delays` turns the spans
into each side kernel's start delay after it became ready, as a share of the running
GEMM's time left (priority 0) and in the GEMM's waves (priority -1; waves from the
hardware profile's GEMM tile and this device's SMs, as the planner counts them). The
medians go into a calibration file's `"give_way"` section (`calibration=` reads it):
equal_priority_wait, high_priority_wait_waves, collective_equal_priority_wait,
collective_high_priority_wait_waves and sm_count.
How long: Llama 2 34B at seq 2048 on an H100, by the planner's own kernel times: GEMMs of
0.05-1.0 ms, the cast and divide of one block's 692M-element gradient 3.2 ms, so a trial
runs about 10 ms of GEMMs; 8 shapes x 4 sessions x 8 trials, with each session's timing
runs, come to about 3 s of GPU time (the stand-in copy on 16 SMs may run slower than its
bandwidth time). With the census (about 6 s on first use, then cached), allocation, and
32 profiled sessions' trace exports, expect well under a minute. No network is used.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.plan.calibrate.give_way_delays import (
    Session,
    calibration_document,
    gemm_waves,
    kernel_spans,
    launches_per_chain,
    start_delays,
    write_calibration,
)

EXIT_REFUSED = 2
NO_CUDA = ("give-way needs one CUDA GPU, and torch sees none (torch.cuda.is_available() is "
           "False); run it on a machine with a GPU, e.g. through `make gpu-check`")  # fmt: skip
SIDES = ("chain", "collective")
PRIORITIES = (0, -1)
HARDWARE_DIR = Path(__file__).resolve().parents[3] / "sweeps" / "hardware"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m harness.plan.probe give-way",
                                 description=(__doc__ or "").split("\n\n")[0])  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, default=Path("give_way_calibration.json"),
                    help="calibration file to write; an existing one (harness.bandwidth's) "
                    "keeps its collectives and gains the give_way section")  # fmt: skip
    ap.add_argument("--model", default="llama2_34b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--hardware", default="h100_80gb", help="profile whose GEMM tile counts waves")
    ap.add_argument("--trials", type=int, default=8, help="phases per session")
    ap.add_argument("--channels", type=int, default=16, help="blocks of the collective stand-in")
    return ap.parse_args(argv)


def refusal(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot run, naming the field and a fix; None when they can."""
    from harness.models.shapes import shape_of

    try:
        shape_of(args.model)
    except (KeyError, ValueError) as e:
        return f"--model {args.model}: {e}"
    for name in ("seq_len", "micro_batch", "trials", "channels"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}"
    if not (HARDWARE_DIR / f"{args.hardware}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml")))
        return f"--hardware {args.hardware} is not a profile; choose one of: {known}"
    if args.output.is_dir() or not args.output.parent.is_dir():
        return f"-o {args.output}: give a file in an existing directory"
    return None


def gemm_tile(hardware: str) -> tuple[int, int]:
    from omegaconf import OmegaConf

    tile = OmegaConf.load(HARDWARE_DIR / f"{hardware}.yaml").device_spec.gemm_tile
    return int(tile[0]), int(tile[1])


def gemm_shapes(model: str, seq_len: int, micro_batch: int) -> list[tuple[int, int, int]]:
    """The distinct (m, n, k) of one block's backward GEMMs, in launch order."""
    from harness.plan.time.kernels import kernel_census

    census = kernel_census(model, "bf16")
    found = [k.at(seq_len * micro_batch) for k in census.phases["block.backward"]
             if k.kind == "gemm"]  # fmt: skip
    return list(dict.fromkeys((int(m), int(n), int(k)) for m, n, k in found))


def triton_missing() -> str | None:
    """Why the collective stand-in (a Triton kernel) cannot run here; None when it can."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return f"triton is not importable: {e}"
    return None


@functools.cache
def _channel_copy() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def channel_copy(src, dst, n, per_program, BLOCK: tl.constexpr):  # noqa: ANN001, N803
        begin = tl.program_id(0) * per_program
        end = tl.minimum(begin + per_program, n)
        for off in range(begin, end, BLOCK):
            idx = off + tl.arange(0, BLOCK)
            tl.store(dst + idx, tl.load(src + idx, mask=idx < end), mask=idx < end)

    return channel_copy


class Work:
    """The tensors of one probe: a GEMM's operands and one block's gradient buffers."""

    def __init__(self, elements: int, channels: int) -> None:
        import torch

        self.grad16 = torch.ones(elements, dtype=torch.bfloat16, device="cuda")
        self.grad32 = torch.empty(elements, dtype=torch.float32, device="cuda")
        self.copy16 = torch.empty_like(self.grad16)
        self.channels = channels

    def side(self, kind: str) -> None:
        if kind == "chain":  # FSDP1's upcast and pre-divide of the flat gradient
            self.grad32.copy_(self.grad16)
            self.grad32.div_(2.0)
            return
        n = self.grad16.numel()
        per = -(-n // self.channels // 4096) * 4096
        _channel_copy()[(self.channels,)](self.grad16, self.copy16, n, per, BLOCK=4096,
                                          num_warps=16)  # fmt: skip


def _seconds(fn: Any, repeat: int = 3) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeat


def _spin_cycles_per_s() -> float:
    import torch

    cycles = 10_000_000
    return cycles / _seconds(lambda: torch.cuda._sleep(cycles))


def run_session(work: Work, gemm: tuple[int, int, int], kind: str, priority: int,
                trials: int, waves: int) -> Session:  # fmt: skip
    """`trials` trials, each: the side work ready at its own phase of the GEMM run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    m, n, k = gemm
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    gemm_s = _seconds(lambda: torch.mm(a, b, out=c))
    side_s = _seconds(lambda: work.side(kind))
    count = min(400, math.ceil((3 * side_s + 2 * gemm_s) / gemm_s))
    run_s, per_s = count * gemm_s, _spin_cycles_per_s()
    compute = torch.cuda.Stream(priority=0)
    side = torch.cuda.Stream(priority=priority)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for trial in range(trials):
            phase_s = run_s * 0.5 * (trial + 0.5) / trials
            with torch.cuda.stream(side):  # launched first: ready only when the spin ends
                torch.cuda._sleep(max(1, int(phase_s * per_s)))
                work.side(kind)
            with torch.cuda.stream(compute):
                for _ in range(count):
                    torch.mm(a, b, out=c)
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        spans = kernel_spans(json.loads(path.read_text()))
    return Session(kind, priority, gemm, waves, tuple(start_delays(spans)),
                   tuple(launches_per_chain(spans)))  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from harness.models.shapes import shape_of

    props = torch.cuda.get_device_properties(0)
    tile = gemm_tile(args.hardware)
    work = Work(shape_of(args.model).layer_params(), args.channels)
    sides = SIDES if triton_missing() is None else ("chain",)
    sessions = []
    for gemm in gemm_shapes(args.model, args.seq_len, args.micro_batch):
        waves = gemm_waves(gemm[0], gemm[1], tile, props.multi_processor_count)
        for kind in sides:
            for priority in PRIORITIES:
                print(f"[give-way] gemm {gemm} {kind} at priority {priority}", flush=True)
                sessions.append(run_session(work, gemm, kind, priority, args.trials, waves))
    notes = (f"{args.model} seq {args.seq_len} x {args.micro_batch}; GEMM tile {tile} from "
             f"hardware={args.hardware}; collective stand-in: "
             + (f"{args.channels} blocks" if "collective" in sides
                else f"not run ({triton_missing()})"))  # fmt: skip
    return calibration_document(sessions, device=props.name, sm_count=props.multi_processor_count,
                                torch_version=torch.__version__, notes=notes)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    why = refusal(args)
    if why is None:
        import torch

        why = None if torch.cuda.is_available() else NO_CUDA
    if why is not None:
        print(f"[harness.plan.probe] refused: {why}", file=sys.stderr)
        return EXIT_REFUSED
    document = measure(args)
    write_calibration(args.output, document)
    section = document["give_way"]
    for key, value in section.items():
        if isinstance(value, int | float):
            print(f"  {key} = {value:.3g}")
    print(f"[harness.plan.probe] give-way calibration written to {args.output}; plan with "
          f"calibration={args.output}")  # fmt: skip
    return 0
