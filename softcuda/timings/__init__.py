"""Raw timings: the CSV schema, reading it back, its statistics, and selection from them.

The one package that both sides of the experiment import: ``softcuda.sweep`` writes rows in
this schema and reads its own rows back (resume, refinement, retries, the profile), and
``softcuda.analysis`` reads them for figures, reports and comparisons.  ``sweep`` and
``analysis`` never import each other (``tests/test_layers.py``); what they share lives here.
Nothing here measures, writes files or plots.
"""

from .schema import DEFAULT_METRIC, METRICS, PROBE_BACKEND  # noqa: F401  (for the CLI)
