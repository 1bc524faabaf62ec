"""What a SLURM dry run shows of each job: a readable name, its place in its grid point's
chain, the batch script as submitted, and what is left to the cluster's defaults."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from harness.slurm.dry_run import chain_lines, node_notes, submission_text
from harness.slurm.resources import job_name

CONFIG = {"model": "llama2_7b", "gpus": 64, "seq_len": 2048, "ckpt_layers": 0,
          "engine": {"name": "yafsdp", "label": "yafsdp"}, "repeat": 1, "repeats": 3}  # fmt: skip


def test_a_job_is_named_by_its_point_engine_and_repeat() -> None:
    assert job_name(CONFIG, fallback="cli") == "llama2_7b-g64-s2048-c0-yafsdp-r1"
    assert job_name({**CONFIG, "repeats": 1}, "cli") == "llama2_7b-g64-s2048-c0-yafsdp"
    assert job_name({"x": 1}, fallback="cli") == "cli"


def test_the_script_as_submitted_names_interpreter_setup_and_srun(tmp_path) -> None:
    parameters = {"job_name": job_name(CONFIG, "cli"), "nodes": 8, "ntasks_per_node": 8,
                  "gpus_per_node": 8, "time": 60, "signal_delay_s": 15,
                  "setup": ["module load nccl"], "srun_args": ["--kill-on-bad-exit=1"]}  # fmt: skip
    text = submission_text(parameters, str(tmp_path / ".submitit/%j"), "chain: x")
    lines = text.splitlines()
    assert lines[0].startswith("sbatch --job-name=llama2_7b-g64-s2048-c0-yafsdp-r1 --nodes=8")
    assert lines[1] == "chain: x"
    assert lines[2].startswith("environment: the submitter's, exported by sbatch")
    assert "    #SBATCH --job-name=llama2_7b-g64-s2048-c0-yafsdp-r1" in lines
    assert "    module load nccl" in lines
    (srun,) = [line for line in lines if line.strip().startswith("srun ")]
    assert "--kill-on-bad-exit=1" in srun
    assert f"{sys.executable} -u -m submitit.core._submit" in srun


@dataclass
class Job:
    idx: int
    overrides: list[str]
    submitit_job: Any = field(default=None)


def test_each_job_says_where_it_stands_in_its_chain() -> None:
    a = ["model=llama2_7b", "engine=yafsdp"]
    b = ["model=llama2_7b", "engine=fsdp1"]
    c = ["model=llama2_13b", "engine=yafsdp"]
    jobs = [Job(0, a), Job(1, b), Job(2, c), Job(3, [*a, "repeat=1"])]
    said = chain_lines(jobs, same_nodes=True)
    assert said[0] == "chain: 1 of 3 at its grid point, submitted at once"
    assert said[1].startswith("chain: 2 of 3 at its grid point, submitted once [1/4] has started")
    assert "--dependency=afterany:<its job id> --nodelist=<its nodes>" in said[1]
    assert said[2] == "chain: the only job at its grid point, submitted at once"
    assert "once [2/4] has started" in said[3]
    assert "nodelist" not in chain_lines(jobs, same_nodes=False)[1]


def test_exclusive_and_mem_are_named_where_left_to_the_cluster() -> None:
    notes = node_notes(None, {})
    assert any("--exclusive" in n and "exclusive=true" in n for n in notes)
    assert any("--mem" in n and "mem_gb=0" in n for n in notes)
    assert node_notes(0, {"exclusive": True}) == []
