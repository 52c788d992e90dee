"""The SDK's version: the one place it is written (pyproject.toml reads it from here, and a test
checks that it is the version of cohort in CMakeLists.txt)."""

__version__ = "0.1.0"
