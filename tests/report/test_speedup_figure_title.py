"""A speedup picture's title and subtitle fit inside the picture, at its narrowest."""

import matplotlib

matplotlib.use("Agg")

from harness.jobdir.grid_point import GridPoint  # noqa: E402
from harness.report import charts as figures  # noqa: E402
from harness.report.speedups import (
    Estimate,  # noqa: E402
    Speedup,  # noqa: E402
)


def test_the_subtitle_fits_the_narrowest_picture(tmp_path, monkeypatch):
    key = GridPoint.of({"model": "llama_tiny", "gpus": 2, "seq_len": 256, "ckpt_layers": 0,
                        "micro_batch": 1, "grad_accum": 1, "dtype": "fp32", "seed": 0})  # fmt: skip
    row = Speedup(key, None, None, 6.0, None, False, estimate=Estimate(6.0, 3, -70.0, 82.0))
    seen = {}
    real_close = figures.plt.close

    def keep(fig):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        title = fig.axes[0].title.get_window_extent(renderer)
        seen["title"], seen["figure"] = title, fig.bbox
        real_close(fig)

    monkeypatch.setattr(figures.plt, "close", keep)
    assert figures.speedup_figure([row], "fsdp1", tmp_path / "s.png")
    assert seen["title"].x0 >= seen["figure"].x0 - 1
    assert seen["title"].x1 <= seen["figure"].x1 + 1
