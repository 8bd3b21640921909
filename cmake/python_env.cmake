# The project's Python environment (scripts/setup --runtimes, requirements.txt): its interpreter is
# the one the Python package is built for and the one the tests run Python with, and its torch
# (PyTorch 2.x from PyPI) is the libtorch the integrations link. Without the environment, Debian's
# python3 is used and the parts that need torch are left out (and their tests skip, saying so).
#   -DMODELMEM_VENV=DIR      the environment (default: .venv in the source tree, or $MODELMEM_VENV)
#   -DMODELMEM_PYTHON_EXE=EXE an interpreter of your own instead
#   -DTorch_DIR=DIR          a TorchConfig.cmake of your own instead of the interpreter's torch
if(DEFINED ENV{MODELMEM_VENV} AND NOT DEFINED MODELMEM_VENV)
  set(MODELMEM_VENV "$ENV{MODELMEM_VENV}")
endif()
set(MODELMEM_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "The project's Python environment")
if(NOT MODELMEM_PYTHON_EXE)
  if(EXISTS "${MODELMEM_VENV}/bin/python")
    set(MODELMEM_PYTHON_EXE "${MODELMEM_VENV}/bin/python")
  elseif(EXISTS /usr/bin/python3)
    set(MODELMEM_PYTHON_EXE /usr/bin/python3)  # Debian's, not whatever comes first on PATH
  else()
    find_program(MODELMEM_PYTHON_EXE python3 REQUIRED)
  endif()
endif()
set(MODELMEM_PYTHON_EXE "${MODELMEM_PYTHON_EXE}" CACHE FILEPATH "The interpreter of the Python package and tests")
if(NOT DEFINED Python_EXECUTABLE)
  set(Python_EXECUTABLE "${MODELMEM_PYTHON_EXE}")
endif()
if(NOT DEFINED Python3_EXECUTABLE)
  set(Python3_EXECUTABLE "${MODELMEM_PYTHON_EXE}")
endif()

# The interpreter's torch, unless a Torch_DIR was given.
if(NOT Torch_DIR AND NOT MODELMEM_MINIMAL)
  execute_process(
    COMMAND "${MODELMEM_PYTHON_EXE}" -c
            "import os, torch.utils; print(os.path.join(torch.utils.cmake_prefix_path, 'Torch'))"
    OUTPUT_VARIABLE modelmem_torch_dir RESULT_VARIABLE modelmem_rc ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(modelmem_rc EQUAL 0 AND EXISTS "${modelmem_torch_dir}/TorchConfig.cmake")
    set(Torch_DIR "${modelmem_torch_dir}" CACHE PATH "The Torch CMake package (the interpreter's torch)" FORCE)
    message(STATUS "modelmem: Python ${MODELMEM_PYTHON_EXE}, torch from ${Torch_DIR}")
  else()
    message(STATUS "modelmem: Python ${MODELMEM_PYTHON_EXE} has no torch (scripts/setup --runtimes "
                   "makes the environment); the libtorch integration is left out")
  endif()
endif()

# A Torch found by find_package must link its own libraries: TorchConfig.cmake searches the
# system folders before its own, so Debian's libtorch-dev (1.13) would be linked under 2.x headers.
function(modelmem_check_torch_libraries)
  if(Torch_FOUND AND TORCH_INSTALL_PREFIX AND TORCH_LIBRARY)
    get_filename_component(prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
    get_filename_component(lib "${TORCH_LIBRARY}" REALPATH)
    string(FIND "${lib}" "${prefix}/" pos)
    if(NOT pos EQUAL 0)
      message(FATAL_ERROR "modelmem: the Torch of ${Torch_DIR} would link ${TORCH_LIBRARY}, "
                          "another PyTorch's library (Debian's libtorch-dev?): remove it "
                          "('apt-get remove libtorch-dev') or give -DMODELMEM_TORCH=OFF")
    endif()
  endif()
endfunction()

# PyPI's torch is a CUDA build: its CMake package compiles and runs a probe of this machine's GPUs
# unless it is told which architectures to build for, and that probe fails under the project's
# CUDA settings (CUDA 20). modelmem compiles no CUDA code against torch, so any list serves.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for Torch's CMake package")
endif()
