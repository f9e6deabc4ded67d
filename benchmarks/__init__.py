"""The benchmarks: ``make bench-<name>`` runs ``bench_<name>.py``; ``make bench`` runs them all."""
