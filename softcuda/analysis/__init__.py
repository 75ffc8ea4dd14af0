"""Reading raw sweep CSVs: crossover detection, figures, profile comparison.

The only part of softcuda that imports matplotlib (lazily, inside the plotting module).
"""
