"""The ``softcuda`` command line: one module per subcommand, thin over the library.

Exit codes (every subcommand): 0 ok; 1 a check failed or profiles differ; 2 usage or input error
(a bad CONFIG.soft, script, spec or CSV).  Errors are one sentence on stderr, never a traceback.
"""

from __future__ import annotations

import click

import softcuda

from .diff_config import diff_config_command
from .init import init_command
from .plot import plot_command
from .run import run_command
from .verify import verify_command

EXIT_CODES = """\b
Exit codes:
  0  ok
  1  a check failed (verify), the profiles differ (diff-config), or init ran out of
     its time budget
  2  usage or input error: a bad CONFIG.soft, graph script, sweep spec or CSV
  130  init was interrupted (Ctrl-C): rows kept, CONFIG.soft untouched; rerun with --resume
"""


@click.group(epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(softcuda.__version__, prog_name="softcuda")
def main() -> None:
    """softcuda: where does moving data over PCIe stop costing more than the GPU saves?

    Backends are chosen once per (op, size bucket), written to a human-readable CONFIG.soft,
    and baked into the graph before anything runs.
    """


for command in (init_command, verify_command, run_command, plot_command, diff_config_command):
    main.add_command(command)
