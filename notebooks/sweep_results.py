# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sweep results
#
# Loads a sweep's `results.csv` (one row per job: grid point, engine, status, metrics),
# pivots it by engine and plots iteration times, speedups and loss curves.
#
# Set `SWEEP_DIR` to a sweep directory (or any directory holding a `results.csv`, such as a
# report directory). Without it, the committed CPU demo under `reports/cpu_demo/` is used.
# A relative path is read from the working directory where it exists there, else from the
# repository root (`jupytext --execute` runs a notebook from `notebooks/`). A sweep without
# `results.csv` gets one built from its job directories (`python -m harness.results
# <sweep dir>` does the same). Run as a script, it saves each picture under
# `outputs/notebooks/` and prints its path.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython import get_ipython
from IPython.display import display

from harness.jobdir.grid_point import POINT_COLUMNS as POINT
from harness.report.jobs import ReportJobs
from harness.report.matching import with_variants
from harness.report.tables import speedup_table
from harness.results.latest import REPO_ROOT, repo_path
from harness.results.table import read_results_csv, write_results_csv


def in_notebook() -> bool:
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


if in_notebook():  # harness.report draws its pictures off screen (Agg); here they go inline
    get_ipython().run_line_magic("matplotlib", "inline")


def show(name: str) -> None:
    """The figure inline in a notebook; as a script, saved and its path printed."""
    if in_notebook():
        plt.show()
        return
    out = REPO_ROOT / "outputs" / "notebooks" / f"sweep_results_{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    plt.savefig(out)
    plt.close()
    print(f"picture: {out}")


SWEEP_DIR = repo_path(os.environ.get("SWEEP_DIR") or "reports/cpu_demo")
csv = SWEEP_DIR / "results.csv"
if not csv.exists():
    if not any(SWEEP_DIR.rglob("result.json")):
        raise FileNotFoundError(
            f"no results.csv or result.json under {SWEEP_DIR} (SWEEP_DIR="
            f"{os.environ.get('SWEEP_DIR') or 'unset: the committed demo'}; relative paths "
            f"are read from {Path.cwd()}, else from the repository root {REPO_ROOT})"
        )
    csv = write_results_csv(SWEEP_DIR)
df = read_results_csv(csv)  # loss curves and other lists back as lists
print(f"{csv}: {len(df)} jobs")
display(df[["job_dir", *POINT, "engine", "status"]])

# %% [markdown]
# ## Which jobs finished

# %%
display(df.groupby(["engine", "status"]).size().unstack(fill_value=0))

# %% [markdown]
# ## Median iteration time (s) per grid point and engine
# The report's statistic: the median over an engine's runs of each run's median step.

# %%
ok = df[df["status"] == "ok"]
if ok.empty or "iteration_time_s" not in ok:
    statuses = ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items())
    print(f"no job of this sweep finished ok ({statuses or 'no jobs'}): there is no time, "
          "memory or speedup to show; each job's result.json says why it failed")  # fmt: skip
    ok = df.iloc[0:0]
    times = pd.DataFrame()
else:
    times = ok.pivot_table(index=POINT, columns="engine", values="iteration_time_s",
                           aggfunc="median")  # fmt: skip
display(times)

# %% [markdown]
# ## Speedup of YaFSDP over each baseline, as the report gives it
# (T_fsdp - T_yafsdp) / T_fsdp: with repeats, the mean over paired repeats, its 95%
# interval and n, and "n.s." where the interval holds 0 (`python -m harness.report`).

# %%
report = ReportJobs(with_variants(df.assign(sweep=str(SWEEP_DIR), job_label=df["job_dir"])),
                    [SWEEP_DIR])  # fmt: skip
speedup = {}
for baseline in report.baselines():
    for setting, rows in report.speedup_tables(baseline):
        header, cells = speedup_table(rows)
        speedup[f"YaFSDP vs {baseline}, {setting.label()}"] = pd.DataFrame(cells, columns=header)
if not speedup:
    print("no speedup: the sweep needs yafsdp and at least one FSDP baseline")
for title, table in speedup.items():
    print(title)
    display(table)

# %%
if not times.empty:
    ax = times.plot.bar(figsize=(8, 3.5), ylabel="median iteration time (s)", rot=30)
    ax.set_title("Iteration time per engine (median over runs)")
    plt.tight_layout()
    show("iteration_time")

# %% [markdown]
# ## Peak memory (MiB) and throughput per engine (median over runs)

# %%
if not ok.empty:
    memory_col = (
        "peak_memory_allocated_bytes"
        if "peak_memory_allocated_bytes" in ok and ok["peak_memory_allocated_bytes"].notna().any()
        else "peak_rss_bytes"
    )
    memory = ok.pivot_table(index=POINT, columns="engine", values=memory_col, aggfunc="median")
    print(f"measure: {memory_col}")
    display((memory / 2**20).round(1))
    display(ok.pivot_table(index=POINT, columns="engine", values="tokens_per_s_per_device",
                           aggfunc="median").round(1))  # fmt: skip

# %% [markdown]
# ## Loss curves of the first grid point (matched engines should agree)

# %%
if not ok.empty and "losses" in ok:
    first = ok.iloc[0][POINT]
    same = ok[(ok[POINT] == first).all(axis=1)]
    fig, ax = plt.subplots(figsize=(6, 3))
    for _, row in same.iterrows():
        ax.plot(row["losses"], label=row["engine"], marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(", ".join(f"{k}={v}" for k, v in first.items()))
    ax.legend()
    plt.tight_layout()
    show("loss")
