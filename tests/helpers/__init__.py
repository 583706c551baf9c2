"""Helpers shared by the test modules: plain functions and classes (fixtures live in conftest.py).

A test module imports from here, never from another test module.
"""
