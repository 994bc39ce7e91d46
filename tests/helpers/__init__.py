"""Shared test helpers, importable from every test folder as ``helpers``
(tests/conftest.py puts tests/ on ``sys.path``)."""
