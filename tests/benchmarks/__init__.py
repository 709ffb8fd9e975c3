"""Developer benchmarks and harnesses (engine, capture, attribution, storage, calibration, the GPU check): scripts a
developer runs, `python tests/benchmarks/NAME.py --help` or `python -m tests.benchmarks.NAME --help` from the
repository root; pytest collects none of them (tests/test_experiment_scripts.py checks that each answers --help)."""
