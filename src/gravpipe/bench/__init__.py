"""Benchmarks behind ``gravpipe bench``: each prints interactions per second, the machine,
and a ratio to a reference measured in the same run. Timings are never asserted in tests."""
