"""What the tests share, as a library (pyproject's pytest `pythonpath` puts tests/ on the path:
`from support.paths import ROOT`). Fixtures are in the conftest.py files; this package holds
only plain helpers, each module named for what it holds; entries/ holds the small trainers and
probes that tests launch by path or mount into an image."""
