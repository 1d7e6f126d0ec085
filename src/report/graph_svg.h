#pragma once
/// Graph layout for the report: Graphviz's `dot` layout rendered to SVG in memory (libgvc).
/// Laying graphs out is a hard problem Graphviz has solved for decades; we only write DOT.
#include <string>

namespace autoshard {

/// Lays out DOT text with `dot` and returns the <svg> element (XML prolog, DOCTYPE and
/// generator comments stripped so the result embeds in HTML).  Deterministic for the same
/// input and Graphviz version.  Throws std::runtime_error when Graphviz rejects the text.
std::string render_dot_svg(const std::string& dot);

/// Quotes a string for DOT (double quotes, backslashes and newlines escaped as \n for labels).
std::string dot_quote(const std::string& s);

}  // namespace autoshard
