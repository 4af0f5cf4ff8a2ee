"""Calibration: measure op, communication and host costs on this device into a cost profile."""
