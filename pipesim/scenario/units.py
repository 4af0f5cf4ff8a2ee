"""Unit scales of scenario file keys (`memory_GiB`, `bandwidth_GBps`, `latency_us`, TFLOP/s)."""
GiB = 2**30
TFLOPS = 1e12
GBps = 1e9
US = 1e-6
