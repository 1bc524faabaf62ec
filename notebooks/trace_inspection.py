# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Trace inspection
# Where was communication hidden behind computation, and where was it exposed?
#
# Set `TRACE_JOB_DIR` to a job directory (one holding `traces/rank<r>.json.gz`), or to
# several separated by `:` to compare engines side by side; or `SWEEP_DIR` to a sweep, whose
# most recently traced grid point is shown with every engine. Without either, the most
# recent job with traces under `outputs/` or `multirun/` (Hydra's output folders) is used.
# Relative paths are read from the working directory where they exist there, else from the
# repository root, so the notebook runs the same from `notebooks/` (as `jupytext --execute`
# runs it) and from the root. Run as a script, it prints the path of each picture.

# %%
import os
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from harness.results.latest import REPO_ROOT, matched_traced_jobs, repo_path
from harness.trace import analyse, find_traces, load_trace, summarize_job
from harness.trace.timeline import engine_label, plot_timeline


def in_notebook() -> bool:
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def show_picture(path: Path) -> None:
    """The picture inline in a notebook; its path when run as a script."""
    if in_notebook():
        display(Image(filename=str(path)))
    else:
        print(f"picture: {path}")


def default_job_dirs() -> list[Path]:
    roots = [repo_path("outputs"), repo_path("multirun")]
    found = [p.parent for root in roots if root.is_dir() for p in root.rglob("traces")
             if find_traces(p.parent)]  # fmt: skip
    if not found:
        raise SystemExit(
            f"no job with traces (traces/rank<r>.json[.gz]) under {roots[0]} or {roots[1]} "
            f"(repository root {REPO_ROOT}); run a sweep with profile.steps>0 (make demo), "
            "or set TRACE_JOB_DIR=<job dir> or SWEEP_DIR=<sweep dir>"
        )
    return [max(found, key=lambda p: p.stat().st_mtime)]


def job_dirs() -> list[Path]:
    if os.environ.get("TRACE_JOB_DIR"):
        dirs = [repo_path(p) for p in os.environ["TRACE_JOB_DIR"].split(os.pathsep)]
        missing = [str(d) for d in dirs if not find_traces(d)]
        if missing:
            raise SystemExit(f"TRACE_JOB_DIR: no traces/rank<r>.json[.gz] in {', '.join(missing)}")
        return dirs
    if os.environ.get("SWEEP_DIR"):
        sweep = repo_path(os.environ["SWEEP_DIR"])
        found = matched_traced_jobs(sweep)
        if not found:
            raise SystemExit(f"SWEEP_DIR={sweep}: no job there has traces/rank0.json[.gz]")
        return found
    return default_job_dirs()


def job_keys(dirs: list[Path]) -> dict[Path, str]:
    """Each job's name in the tables: its directory's name (several jobs share an engine,
    and repeats share a point), or its path below the jobs' common folder where names clash."""
    names = [d.name for d in dirs]
    if len(set(names)) == len(names):
        return dict(zip(dirs, names, strict=True))
    root = Path(os.path.commonpath([d.resolve() for d in dirs]))
    return {d: str(d.resolve().relative_to(root)) for d in dirs}


JOB_DIRS = job_dirs()
JOBS = job_keys(JOB_DIRS)
pd.set_option("display.precision", 3)
print("\n".join(map(str, JOB_DIRS)))

# %% [markdown]
# ## Overlap per engine
# overlap % = time both computation and communication are busy / communication time
# (all ranks, all profiled steps); the other columns are per-step means in milliseconds.

# %%
profiles = {JOBS[d]: summarize_job(d) for d in JOB_DIRS}
summary = pd.DataFrame({job: p["summary"] for job, p in profiles.items()}).T
summary.insert(0, "engine", [engine_label(d) for d in JOB_DIRS])
summary[[c for c in summary.columns if c.endswith("_s_per_step")]] *= 1e3
summary.columns = [c.replace("_s_per_step", "_ms_per_step") for c in summary.columns]
display(summary)

# %% [markdown]
# ## Per rank and step

# %%
steps = pd.concat(
    [pd.DataFrame(p["steps"]).assign(job=job) for job, p in profiles.items()],
    ignore_index=True,
)
display(steps.set_index(["job", "rank", "step"]))

# %% [markdown]
# ## Timeline of one step (rank 0), engines on one time scale

# %%
png = plot_timeline(JOB_DIRS, JOB_DIRS[0] / "traces" / "timeline.png")
show_picture(png)

# %% [markdown]
# ## Largest exposed-communication gaps (rank 0)
# Stretches where a collective ran and no computation did; offset from the step start.

# %%
gaps = []
for d in JOB_DIRS:
    a = analyse(load_trace(find_traces(d)[0]))
    gaps.append(a.gaps.assign(job=JOBS[d], engine=engine_label(d)))
gaps = pd.concat(gaps, ignore_index=True).sort_values("exposed_s", ascending=False)
gaps = gaps.assign(offset_ms=gaps.offset_s * 1e3, exposed_ms=gaps.exposed_s * 1e3)
display(gaps[["job", "engine", "step", "offset_ms", "exposed_ms"]].head(10))

# %% [markdown]
# ## Communication by engine annotation (unit)
# Each collective is attributed to the innermost engine annotation that issued it;
# concurrent collectives each count their own time.

# %%
units = pd.concat(
    [pd.DataFrame(p["units"]).assign(job=job) for job, p in profiles.items()],
    ignore_index=True,
)
if "comm_s" in units:
    display(units[units["comm_s"] > 0].sort_values("exposed_comm_s", ascending=False).head(15))
else:
    print("no engine annotation names a unit in these traces")
