"""Unit scales of scenario file keys (`memory_GiB`, `bandwidth_GBps`, `latency_us`, TFLOP/s)."""
GiB = 2**30
TFLOPS = 1e12
GBps = 1e9
US = 1e-6
MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
