"""Pallas kernels for the hot path; each op is ``api`` + ``reference`` + one file per backend."""
