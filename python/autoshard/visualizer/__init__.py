"""HTML pages of plans, under AutoParallel's names (`autoparallel.visualizer`).

    from autoshard.visualizer.build_display_from_json import generate_visualization_html
    html = generate_visualization_html(opt.get_json())

Importing this package imports neither torch nor the C++ extension.
"""
from __future__ import annotations

from .build_display_from_json import generate_visualization_html

__all__ = ["generate_visualization_html"]
