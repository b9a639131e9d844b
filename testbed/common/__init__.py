"""Helpers every layer of the testbed shares: atomic files, names. Imports nothing heavy."""
