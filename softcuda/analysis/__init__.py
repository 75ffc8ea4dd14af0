"""Reading raw sweeps for people: figures, the crossover report, profile diffs, comparing two
sweeps.  The statistics they rest on are ``softcuda.timings``.

The only part of softcuda that imports matplotlib (lazily, inside the plotting module).
"""

from softcuda.timings.load import load_csvs, load_metadata, sweep_date  # noqa: F401  (for the CLI)

from .chains import chain_figure, measured_crossovers, model_crossovers  # noqa: F401
from .compare import compare_sweeps, format_comparison  # noqa: F401
from .diff import diff_configs, format_diff  # noqa: F401
from .plots import FORMATS, save_figure  # noqa: F401
from .report import build_report, summary_markdown, write_figures  # noqa: F401
