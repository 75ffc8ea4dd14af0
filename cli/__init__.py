"""The ``softcuda`` command line: one module per subcommand, thin over the library.

Exit codes (every subcommand): 0 ok; 1 a check failed, profiles differ or two sweeps are not
stable; 2 usage or input error (a bad CONFIG.soft, script, spec or CSV).  Errors are one
sentence on stderr, never a traceback.
"""

from __future__ import annotations

import click

import softcuda

from .compare_sweeps import compare_sweeps_command
from .diff_config import diff_config_command
from .init import init_command
from .plot import plot_command
from .run import run_command
from .verify import verify_command

EXIT_CODES = """\b
Exit codes:
  0  ok
  1  a check failed (verify), the profiles differ (diff-config), two sweeps
     are not stable (compare-sweeps), init ran out of its time budget or was
     stopped by a full disk or too little memory (its rows are kept), or
     softcuda's CUDA kernels did not compile
  2  usage or input error: a bad CONFIG.soft, graph script, sweep spec or CSV
  130  interrupted (Ctrl-C): init keeps its rows and CONFIG.soft (it says how to go on)
"""


class _Main(click.Group):
    """The root group: Ctrl-C in any subcommand is exit 130 and one line (click's own answer
    is "Aborted!" and exit 1, the code of a failed check); init says more about its rows."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo(f"\ninterrupted: softcuda {ctx.invoked_subcommand} stopped", err=True)
            raise SystemExit(130) from None


@click.group(cls=_Main, epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(softcuda.__version__, prog_name="softcuda")
def main() -> None:
    """softcuda: where does moving data over PCIe stop costing more than the GPU saves?

    Backends are chosen once per (op, size bucket), written to a human-readable CONFIG.soft,
    and baked into the graph before anything runs.
    """


for command in (
    init_command,
    verify_command,
    run_command,
    plot_command,
    diff_config_command,
    compare_sweeps_command,
):
    main.add_command(command)
