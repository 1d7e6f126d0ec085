"""Puts python/ on sys.path so the tests run from a plain checkout."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
