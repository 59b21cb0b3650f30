"""JetEncode benchmark suite: `python -m bench [--quick] [--only NAME ...]` (docs/benchmarks.md)."""
