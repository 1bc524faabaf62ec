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
# several separated by `:` to compare engines side by side. Without it, the most recent
# job with traces under `outputs/` or `multirun/` (Hydra's output folders) is used.

# %%
import os
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from harness.trace import analyse, find_traces, load_trace, summarize_job
from harness.trace.timeline import engine_label, plot_timeline


def default_job_dirs() -> list[Path]:
    found = [
        p.parent
        for root in (Path("outputs"), Path("multirun"))
        if root.is_dir()
        for p in root.rglob("traces")
        if find_traces(p.parent)
    ]
    if not found:
        raise SystemExit("no job with traces found; set TRACE_JOB_DIR=<job dir>")
    return [max(found, key=lambda p: p.stat().st_mtime)]


env = os.environ.get("TRACE_JOB_DIR")
JOB_DIRS = [Path(p) for p in env.split(os.pathsep)] if env else default_job_dirs()
pd.set_option("display.precision", 3)
display(JOB_DIRS)

# %% [markdown]
# ## Overlap per engine
# overlap % = time both computation and communication are busy / communication time
# (all ranks, all profiled steps); the other columns are per-step means in milliseconds.

# %%
profiles = {engine_label(d): summarize_job(d) for d in JOB_DIRS}
summary = pd.DataFrame({label: p["summary"] for label, p in profiles.items()}).T
summary[[c for c in summary.columns if c.endswith("_s_per_step")]] *= 1e3
summary.columns = [c.replace("_s_per_step", "_ms_per_step") for c in summary.columns]
display(summary)

# %% [markdown]
# ## Per rank and step

# %%
steps = pd.concat(
    [pd.DataFrame(p["steps"]).assign(engine=label) for label, p in profiles.items()],
    ignore_index=True,
)
display(steps.set_index(["engine", "rank", "step"]))

# %% [markdown]
# ## Timeline of one step (rank 0), engines on one time scale

# %%
png = plot_timeline(JOB_DIRS, JOB_DIRS[0] / "traces" / "timeline.png")
display(Image(filename=str(png)))

# %% [markdown]
# ## Largest exposed-communication gaps (rank 0)
# Stretches where a collective ran and no computation did; offset from the step start.

# %%
gaps = []
for d in JOB_DIRS:
    a = analyse(load_trace(find_traces(d)[0]))
    gaps.append(a.gaps.assign(engine=engine_label(d)))
gaps = pd.concat(gaps, ignore_index=True).sort_values("exposed_s", ascending=False)
gaps = gaps.assign(offset_ms=gaps.offset_s * 1e3, exposed_ms=gaps.exposed_s * 1e3)
display(gaps[["engine", "step", "offset_ms", "exposed_ms"]].head(10))

# %% [markdown]
# ## Communication by engine annotation (unit)
# Each collective is attributed to the innermost engine annotation that issued it;
# concurrent collectives each count their own time.

# %%
units = pd.concat(
    [pd.DataFrame(p["units"]).assign(engine=label) for label, p in profiles.items()],
    ignore_index=True,
)
display(units[units["comm_s"] > 0].sort_values("exposed_comm_s", ascending=False).head(15))
