"""Package metadata lives in pyproject.toml; this shim keeps `python setup.py develop` working."""

from setuptools import setup

setup()
