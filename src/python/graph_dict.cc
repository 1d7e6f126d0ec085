/// A Python graph dict (what autoshard.tracer.export.to_graph_dict builds) converted straight
/// into the JSON value the graph reader takes, so that a traced graph reaches the planner
/// without `json.dumps` and a text parse: on LLaMA-3 8B's 9,000 nodes the text round trip was
/// most of the hand-off (docs/benchmarks.md, "Issue 24, item 4").  The reader then runs its
/// usual checks, so both paths give the same Graph and the same error messages.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ir/file_util.h"
#include "python/bindings.h"

namespace autoshard::python {

namespace {

/// Where a value sits in the document: a chain of frames, turned into a JSON pointer only when
/// an error is reported.
struct Where {
  const Where* parent = nullptr;
  std::string_view key;  ///< object member (when index < 0)
  Py_ssize_t index = -1;

  std::string pointer() const {
    if (!parent) return {};
    std::string head = parent->pointer() + '/';
    return index >= 0 ? head + std::to_string(index) : head + std::string(key);
  }
};

class Converter {
 public:
  explicit Converter(std::string_view origin) : origin_(origin) {}

  nlohmann::json value(PyObject* o, const Where& w) const {
    // Exact types first: the exporter only makes dicts, lists, str, int, float, bool, None.
    if (PyUnicode_Check(o)) return string(o, w);
    if (o == Py_None) return nullptr;
    if (PyBool_Check(o)) return o == Py_True;
    if (PyLong_Check(o)) return integer(o, w);
    if (PyFloat_Check(o)) {
      double d = PyFloat_AS_DOUBLE(o);
      // JSON cannot spell these; the exporter writes {"float": "inf"} instead.
      if (!std::isfinite(d)) fail(w, "non-finite float (write {\"float\": \"inf\"|\"-inf\"|\"nan\"})");
      return d;
    }
    if (PyDict_Check(o)) return object(o, w);
    if (PyList_Check(o) || PyTuple_Check(o)) return array(o, w);
    fail(w, fmt::format("unsupported value of type {} (expected dict, list, str, int, float, "
                        "bool or None)", Py_TYPE(o)->tp_name));
  }

 private:
  [[noreturn]] void fail(const Where& w, std::string_view why) const {
    std::string where = w.pointer();
    if (where.empty()) where = "top level";
    throw std::invalid_argument(one_line(fmt::format("{}: {}: {}", origin_, where, why)));
  }

  std::string_view utf8(PyObject* s, const Where& w) const {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(s, &n);
    if (!p) {
      PyErr_Clear();
      fail(w, "string is not valid UTF-8");
    }
    return {p, static_cast<size_t>(n)};
  }

  nlohmann::json string(PyObject* s, const Where& w) const { return std::string(utf8(s, w)); }

  nlohmann::json integer(PyObject* o, const Where& w) const {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0) return static_cast<int64_t>(v);
    // As the text reader would see it: unsigned when it fits, else a float.
    if (overflow > 0) {
      unsigned long long u = PyLong_AsUnsignedLongLong(o);
      if (!PyErr_Occurred()) return static_cast<uint64_t>(u);
      PyErr_Clear();
    }
    double d = PyLong_AsDouble(o);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      fail(w, "integer out of range");
    }
    return d;
  }

  nlohmann::json object(PyObject* d, const Where& w) const {
    nlohmann::json out = nlohmann::json::object();
    PyObject *k = nullptr, *v = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) fail(w, fmt::format("object key of type {} (expected str)",
                                                   Py_TYPE(k)->tp_name));
      std::string_view key = utf8(k, w);
      Where here{&w, key, -1};
      out[std::string(key)] = value(v, here);
    }
    return out;
  }

  nlohmann::json array(PyObject* seq, const Where& w) const {
    bool list = PyList_Check(seq);
    Py_ssize_t n = list ? PyList_GET_SIZE(seq) : PyTuple_GET_SIZE(seq);
    nlohmann::json out = nlohmann::json::array();
    out.get_ref<nlohmann::json::array_t&>().reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = list ? PyList_GET_ITEM(seq, i) : PyTuple_GET_ITEM(seq, i);
      out.push_back(value(item, Where{&w, {}, i}));
    }
    return out;
  }

  std::string_view origin_;
};

}  // namespace

nlohmann::json json_from_python(pybind11::handle obj, std::string_view origin) {
  return Converter(origin).value(obj.ptr(), Where{});
}

}  // namespace autoshard::python
