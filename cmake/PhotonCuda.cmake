# CUDA backend: the static library photon_cuda (the kernels and the CudaBackend of
# src/backend/cuda), and from it the module libphoton-cuda.so (src/backend/cuda/module.cpp), which
# libphoton loads with dlopen when a model is asked to run on a GPU. libphoton itself never links
# CUDA: a machine without CUDA libraries loads it and runs on the CPU.
#
# PHOTON_CUDA = AUTO (default): built when a CUDA compiler (nvcc) is found; ON: required;
# OFF: not built. Code for sm_80 (A100 and newer Ampere/Ada via binary compatibility) and sm_90
# (H100/H200) plus PTX for both; nothing needs sm_90a yet (no wgmma or setmaxnreg kernels).
# It builds without a GPU; the GPU tests (tests/gpu) skip visibly when no device is present.
set(PHOTON_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found), ON or OFF")
set_property(CACHE PHOTON_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${PHOTON_CUDA}" _photon_cuda_mode)

set(PHOTON_CUDA_ENABLED OFF)
if(NOT _photon_cuda_mode STREQUAL "OFF")
  # nvcc outside PATH at the toolkit's usual place still counts as found.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(PHOTON_NVCC nvcc HINTS /usr/local/cuda/bin)
    if(PHOTON_NVCC)
      set(ENV{CUDACXX} "${PHOTON_NVCC}")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(PHOTON_CUDA_ENABLED ON)
  elseif(_photon_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "PHOTON_CUDA=ON but no CUDA compiler was found: put nvcc on PATH or set "
                        "CMAKE_CUDA_COMPILER")
  else()
    message(STATUS "photon: no CUDA compiler found; the CUDA backend is not built")
  endif()
endif()

if(PHOTON_CUDA_ENABLED)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  # CMake before 3.26 does not know nvcc's C++20 flag (nvcc has it since CUDA 12): teach it, as
  # CMake 3.26's own NVIDIA-CUDA module does.
  if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES
     AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "photon: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES})")

  file(GLOB PHOTON_CUDA_SOURCES CONFIGURE_DEPENDS
    ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
  list(FILTER PHOTON_CUDA_SOURCES EXCLUDE REGEX "/module\\.cpp$")
  add_library(photon_cuda STATIC ${PHOTON_CUDA_SOURCES})
  # Only header-only parts of src/core and src/backend are used, so photon_cuda does not depend on
  # libphoton: the module carries everything it runs.
  target_include_directories(photon_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(photon_cuda PUBLIC CUDA::cudart CUDA::cublasLt)
  target_compile_features(photon_cuda PUBLIC cxx_std_20)
  # Hidden: the module exports its entry point alone.
  set_target_properties(photon_cuda PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CUDA_RUNTIME_LIBRARY Shared
    CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  set(_photon_cuda_warnings
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow,-Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${PHOTON_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${PHOTON_WERROR}>>:-Werror=all-warnings>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${PHOTON_WERROR}>>:-Xcompiler=-Werror>)
  target_compile_options(photon_cuda PRIVATE ${_photon_cuda_warnings})

  # The module: build/lib/libphoton-cuda.so next to libphoton.so. Undefined symbols fail the link
  # here rather than the dlopen on a user's machine. Installed, it finds the CUDA libraries at the
  # toolkit path it was linked against (or through the loader's usual search).
  add_library(photon_cuda_module MODULE ${CMAKE_SOURCE_DIR}/src/backend/cuda/module.cpp)
  target_link_libraries(photon_cuda_module PRIVATE photon_cuda)
  # It exports its entry point alone (the version script also hides what hidden visibility cannot,
  # such as the C++ runtime's unique symbols of inline functions).
  set(PHOTON_CUDA_VERSION_SCRIPT ${CMAKE_SOURCE_DIR}/cmake/photon-cuda.version)
  target_link_options(photon_cuda_module PRIVATE -Wl,--no-undefined
                      "LINKER:--version-script=${PHOTON_CUDA_VERSION_SCRIPT}")
  target_compile_options(photon_cuda_module PRIVATE ${_photon_cuda_warnings})
  set_target_properties(photon_cuda_module PROPERTIES
    OUTPUT_NAME photon-cuda PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
    CUDA_RUNTIME_LIBRARY Shared
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${PHOTON_CUDA_VERSION_SCRIPT}
    INSTALL_RPATH_USE_LINK_PATH ON)
endif()
