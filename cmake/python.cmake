# The Python extension module autoshard._core (pybind11), from src/python/*.cc, and the
# install rules a wheel needs (scikit-build-core: pyproject.toml at the repo root).
#
# pybind11 comes from the build environment: scikit-build-core puts it on CMAKE_PREFIX_PATH;
# a developer build finds it through AUTOSHARD_VENV_PYTHON (`python -m pybind11 --cmakedir`).
if(NOT pybind11_DIR AND AUTOSHARD_VENV_PYTHON)
  execute_process(COMMAND ${AUTOSHARD_VENV_PYTHON} -m pybind11 --cmakedir
                  OUTPUT_VARIABLE _autoshard_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _autoshard_pybind11_rc ERROR_QUIET)
  if(_autoshard_pybind11_rc EQUAL 0)
    set(pybind11_DIR ${_autoshard_pybind11_dir} CACHE PATH "pybind11's CMake package")
  endif()
  if(NOT Python_EXECUTABLE)
    set(Python_EXECUTABLE ${AUTOSHARD_VENV_PYTHON})
  endif()
endif()
set(PYBIND11_FINDPYTHON ON)
find_package(pybind11 2.12 CONFIG REQUIRED)

file(GLOB AUTOSHARD_PY_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/python/*.cc)
pybind11_add_module(_core MODULE ${AUTOSHARD_PY_SOURCES})
target_include_directories(_core PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(_core PRIVATE autoshard_report)
target_compile_definitions(_core PRIVATE AUTOSHARD_VERSION="${PROJECT_VERSION}")

if(SKBUILD)
  # The wheel: autoshard/_core*.so beside the pure-Python package (wheel.packages in
  # pyproject.toml), and the C++ command line as the `autoshard` script.
  install(TARGETS _core LIBRARY DESTINATION autoshard)
  install(TARGETS autoshard RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
endif()

# The pytest suite imports the freshly built module (python/autoshard/core.py reads
# AUTOSHARD_CORE) together with the package sources in python/.
foreach(t python_apply python_tracer python_docs)
  if(TEST ${t})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "AUTOSHARD_CORE=$<TARGET_FILE:_core>")
  endif()
endforeach()
