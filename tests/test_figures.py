"""Picture: a figure drawn once for display, printed as matplotlib prints it."""

import io

import matplotlib.pyplot as plt
from IPython.core.interactiveshell import InteractiveShell

from autograd_lab.accumulation import draw_timeline
from autograd_lab.distributed import draw_update_timeline
from autograd_lab.figures import Picture, new_figure


def test_a_picture_shows_once_as_png_and_prints_like_its_figure():
    before = plt.get_fignums()
    picture = draw_timeline([[0, 1], [2, 3]], 5)
    assert isinstance(picture, Picture) and plt.get_fignums() == before  # nothing left for pyplot to show
    data, _ = InteractiveShell.instance().display_formatter.format(picture)
    assert set(data) == {"image/png", "text/plain"}
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert data["text/plain"] == repr(picture.figure) == "<Figure size 560x152 with 1 Axes>"


def test_the_png_keeps_the_figures_own_size():
    picture = draw_update_timeline([[("forward", 0, 1), ("all-reduce", 1, 2)]], title="t")
    png = picture._repr_png_()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    w_in, h_in = picture.figure.get_size_inches()
    assert (width, height) == (round(w_in * picture.figure.dpi), round(h_in * picture.figure.dpi))


def test_a_picture_reaches_its_figure():
    fig, ax = new_figure((2, 1), 50)
    ax.plot([0, 1])
    picture = Picture(fig)
    assert picture.axes == [ax]
    buffer = io.BytesIO()
    picture.savefig(buffer, format="svg")
    assert b"<svg" in buffer.getvalue()
