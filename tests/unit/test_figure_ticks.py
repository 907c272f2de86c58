"""The report's size axes stay readable at any number of sizes: a busbw figure over 8 B to 1 GiB
(dtune-comm's widest sweep) and over two sizes draws tick labels that do not overlap (their rendered
boxes, measured by matplotlib's own renderer), at powers of 4, and always at least two of them."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from dtune_report import figures  # noqa: E402
from dtune_report.figures import PowerOfFourLocator, busbw_vs_size  # noqa: E402


def comm_frame(sizes):
    rows = []
    for c in ("allreduce", "allgather"):
        for s in sizes:
            rows.append(
                {
                    "file": "f.h5",
                    "run": "r",
                    "collective": c,
                    "placement": "out-of-place",
                    "size_bytes": float(s),
                    "busbw_gbps": 1.0 + np.log2(s),
                    "busbw_factor": 1.0,
                }
            )
    fits = pd.DataFrame([{"file": "f.h5", "run": "r", "setting": "shm", "alpha_us": 2.0, "fit_busbw_gbps": 10.0}])
    return pd.DataFrame(rows), fits


@pytest.mark.parametrize(
    "sizes",
    [
        [8 * 2**i for i in range(28)],  # 8 B to 1 GiB by 2
        [8 * 8**i for i in range(7)],  # the quickstart's 8 B to 2 MiB by 8 (-e 4M -f 8)
        [8, 4 << 20],
        [1024, 2048],  # no two powers of 4 in view
    ],
)
def test_size_tick_labels_never_overlap(tmp_path, sizes, monkeypatch):
    comm, fits = comm_frame(sizes)
    drawn = []  # the figure as _save gets it, before it is closed
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: (drawn.append(fig), save(fig, path))[1])
    assert busbw_vs_size(comm, fits, tmp_path / "busbw.png") is not None
    (fig,) = drawn
    canvas = FigureCanvasAgg(fig)  # closed by _save: drawn again as it was saved
    canvas.draw()
    renderer = canvas.get_renderer()
    assert len(fig.axes) == 2
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        lo, hi = ax.get_xlim()
        labels = [t for t in labels if lo <= t.get_position()[0] <= hi]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        assert len(boxes) >= 2, [t.get_text() for t in labels]
        for a, b in zip(boxes, boxes[1:]):
            assert a.x1 < b.x0, [t.get_text() for t in labels]
    plt.close("all")


def test_locator_thins_powers_of_four():
    loc = PowerOfFourLocator(max_ticks=6)
    ticks = loc.tick_values(8, 2**30)  # 16 B .. 1 GiB: 14 powers of 4
    assert len(ticks) <= 6
    assert all(np.log(t) / np.log(4) == pytest.approx(round(np.log(t) / np.log(4))) for t in ticks)
    assert ticks == [4.0**3, 4.0**6, 4.0**9, 4.0**12, 4.0**15]  # 64 B, 4 KiB, ..., 1 GiB
    assert loc.tick_values(16, 1024) == [16.0, 64.0, 256.0, 1024.0]  # few: every power
    assert loc.tick_values(900, 2300) == [1024.0, 2048.0]  # one power of 4 in view: powers of 2
