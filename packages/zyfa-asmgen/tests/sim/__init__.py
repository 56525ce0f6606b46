"""Tests of zyfa_asmgen.sim (a package so that its conftest does not shadow tests/conftest.py)."""
