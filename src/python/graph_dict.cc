/// A Python graph dict (what autoshard.tracer.export.to_graph_dict builds) read in place by the
/// graph reader (ir/graph_reader.h) through a view of the Python objects: no JSON text and no
/// intermediate JSON tree, whose building and freeing were most of the hand-off on LLaMA-3 8B's
/// 9,000 nodes (docs/benchmarks.md, "Issue 24, item 4").  The reader is the file reader, so
/// both paths give the same Graph and the same error messages.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ir/graph_reader.h"
#include "python/bindings.h"

namespace autoshard::python {

namespace {

/// The UTF-8 of a str (cached inside the object by CPython), or nullopt when it cannot be
/// encoded (lone surrogates).
std::optional<std::string_view> utf8(PyObject* s) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (!p) {
    PyErr_Clear();
    return std::nullopt;
  }
  return std::string_view(p, static_cast<size_t>(n));
}

/// The reader's view of one Python value: dict = object, list or tuple = array, str, bool,
/// int, finite float, None.  An int beyond int64 reads as the text reader would see it
/// (unsigned when it fits, else a float); anything else (a set, a non-finite float, ...)
/// is no JSON kind, and messages name it.  Needs the GIL; borrows the references.
class PyView {
 public:
  explicit PyView(PyObject* o) : o_(o) {}

  bool is_object() const { return PyDict_Check(o_); }
  bool is_array() const { return PyList_Check(o_) || PyTuple_Check(o_); }
  bool is_string() const { return PyUnicode_Check(o_); }
  bool is_boolean() const { return PyBool_Check(o_); }
  bool is_null() const { return o_ == Py_None; }
  bool is_integer() const {
    IntKind k = int_kind();
    return k == IntKind::kInt64 || k == IntKind::kUint64;
  }
  bool is_float() const {
    return (PyFloat_Check(o_) && std::isfinite(PyFloat_AS_DOUBLE(o_))) ||
           int_kind() == IntKind::kDouble;
  }
  bool int64(int64_t& out) const {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o_, &overflow);
    if (overflow != 0) return false;
    out = static_cast<int64_t>(v);
    return true;
  }
  bool boolean() const { return o_ == Py_True; }
  double number() const {
    if (PyFloat_Check(o_)) return PyFloat_AS_DOUBLE(o_);
    double d = PyLong_AsDouble(o_);  // an int beyond uint64 (int_kind() checked it fits)
    if (d == -1.0 && PyErr_Occurred()) PyErr_Clear();
    return d;
  }
  bool text(std::string_view& out) const {
    std::optional<std::string_view> s = utf8(o_);
    if (!s) return false;
    out = *s;
    return true;
  }
  size_t size() const {
    return static_cast<size_t>(PyList_Check(o_) ? PyList_GET_SIZE(o_) : PyTuple_GET_SIZE(o_));
  }
  PyView at(size_t i) const {
    const auto k = static_cast<Py_ssize_t>(i);
    return PyView(PyList_Check(o_) ? PyList_GET_ITEM(o_, k) : PyTuple_GET_ITEM(o_, k));
  }
  /// A scan rather than a hashed lookup: graph dicts have a handful of keys, and a lookup would
  /// first have to make a Python str of `key`.
  std::optional<PyView> find(std::string_view key) const {
    PyObject *k = nullptr, *v = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o_, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) continue;  // reported by members()
      std::optional<std::string_view> s = utf8(k);
      if (s && *s == key) return PyView(v);
    }
    return std::nullopt;
  }
  template <class F, class Bad>
  void members(F&& f, Bad&& bad) const {
    PyObject *k = nullptr, *v = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o_, &pos, &k, &v)) {
      if (!PyUnicode_Check(k))
        bad(fmt::format("object key of type {} (expected str)", Py_TYPE(k)->tp_name));
      std::optional<std::string_view> s = utf8(k);
      if (!s) bad("object key is not valid UTF-8");
      f(*s, PyView(v));
    }
  }
  std::string describe() const {
    if (is_integer()) return fmt::format("integer {}", dump());
    if (is_float()) return fmt::format("number {}", dump());
    if (is_object()) return "object";
    if (is_array()) return "array";
    if (is_string()) return "string";
    if (is_boolean()) return "boolean";
    if (is_null()) return "null";
    if (PyFloat_Check(o_))  // JSON cannot spell these; the exporter writes {"float": "inf"}
      return fmt::format("non-finite float {} (JSON spells it {{\"float\": \"{}\"}})",
                         PyFloat_AS_DOUBLE(o_), describe_non_finite());
    if (PyLong_Check(o_)) return "integer out of range";
    return fmt::format("value of type {} (not JSON)", Py_TYPE(o_)->tp_name);
  }
  /// A number as nlohmann's writer spells it, so that messages match the text reader's.
  std::string dump() const {
    switch (int_kind()) {
      case IntKind::kInt64: return nlohmann::json(PyLong_AsLongLong(o_)).dump();
      case IntKind::kUint64: return nlohmann::json(PyLong_AsUnsignedLongLong(o_)).dump();
      case IntKind::kDouble: return nlohmann::json(number()).dump();
      default: break;
    }
    return nlohmann::json(PyFloat_Check(o_) ? PyFloat_AS_DOUBLE(o_) : 0.0).dump();
  }

 private:
  enum class IntKind { kNone, kInt64, kUint64, kDouble, kHuge };

  /// How the text reader would hold this int: int64, uint64, a double, or not at all.
  IntKind int_kind() const {
    if (!PyLong_Check(o_) || PyBool_Check(o_)) return IntKind::kNone;
    int overflow = 0;
    (void)PyLong_AsLongLongAndOverflow(o_, &overflow);
    if (overflow == 0) return IntKind::kInt64;
    if (overflow > 0) {
      (void)PyLong_AsUnsignedLongLong(o_);
      if (!PyErr_Occurred()) return IntKind::kUint64;
      PyErr_Clear();
    }
    double d = PyLong_AsDouble(o_);
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return IntKind::kHuge;
    }
    return IntKind::kDouble;
  }

  const char* describe_non_finite() const {
    double d = PyFloat_AS_DOUBLE(o_);
    return std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";
  }

  PyObject* o_;
};

}  // namespace

Graph graph_from_python(pybind11::handle obj, std::string_view origin) {
  return graph_reader::Reader<PyView>(origin).graph(PyView(obj.ptr()));
}

}  // namespace autoshard::python
