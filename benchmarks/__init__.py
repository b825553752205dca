"""Speed and memory measurements (not tests). See BENCHMARKS.md for the figures and commands."""
