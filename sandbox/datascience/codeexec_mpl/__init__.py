"""codeexec's matplotlib backend: MPLBACKEND=module://codeexec_mpl.

It draws with Agg, matplotlib's non-interactive backend, and turns what
would open a window into a file that codeexec returns as an image:

- plt.show() saves every open figure as a PNG file in the working directory
  (figure_1.png, figure_2.png, ...: the first free names), then closes them,
  as closing their windows would;
- a figure still open when the program exits is saved the same way;
- but a figure that the program saved itself (savefig) and did not change
  afterwards is not saved again: its file comes back already.

CODEEXEC_FIGURE_DIR, when set, names the folder to save into instead of the
working directory at the first figure.

Matplotlib imports this module when a program makes its first figure, so a
program that does not plot pays nothing for it, and one that chose another
backend (matplotlib.use("Agg")) keeps it.
"""

import atexit
import functools
import os
import sys

from matplotlib import _pylab_helpers
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["FigureCanvas", "FigureManager", "show"]

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase

_folder = os.environ.get("CODEEXEC_FIGURE_DIR") or os.getcwd()
_count = 0


def _next_path():
    global _count
    while True:
        _count += 1
        path = os.path.join(_folder, "figure_%d.png" % _count)
        if not os.path.lexists(path):
            return path


def _save_open_figures():
    for manager in _pylab_helpers.Gcf.get_all_fig_managers():
        fig = manager.canvas.figure
        if getattr(fig, "_codeexec_saved", False) and not fig.stale:
            continue  # the program saved it as it is
        fig.savefig(_next_path(), format="png")


def show(*args, **kwargs):
    """Save every open figure as PNG, then close them all."""
    try:
        _save_open_figures()
    finally:
        _pylab_helpers.Gcf.destroy_all()


def _at_exit():
    try:
        _save_open_figures()
    except Exception as e:  # exiting anyway: say why, do not mask the exit
        sys.stderr.write("codeexec: could not save the open figures: %s\n" % e)


# Registered after matplotlib's own Gcf.destroy_all (imported above), so it
# runs before it.
atexit.register(_at_exit)

_savefig = Figure.savefig


@functools.wraps(_savefig)
def _savefig_noted(self, *args, **kwargs):
    result = _savefig(self, *args, **kwargs)
    # savefig leaves the figure stale (it restores what it changed to draw);
    # from here on, stale means the program changed it after saving.
    self.stale = False
    self._codeexec_saved = True
    return result


Figure.savefig = _savefig_noted
