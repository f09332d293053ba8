"""Prometheus metrics of the worker and JSON log lines."""
