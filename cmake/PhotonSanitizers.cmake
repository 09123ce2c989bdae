# Sanitizer and fuzzing builds, each in a build directory of its own (scripts/sanitize,
# scripts/fuzz). Included from the top-level CMakeLists.txt before any target is defined, so the
# flags reach the library, the tests, the CLI and the examples alike.
#
#   -DPHOTON_SANITIZE=address,undefined  AddressSanitizer (with LeakSanitizer) + UBSan, every target
#   -DPHOTON_SANITIZE=thread             ThreadSanitizer
#   -DPHOTON_FUZZ=ON                     also the libFuzzer targets of tests/fuzz (clang only); the
#                                        library gets coverage instrumentation, and the sanitizers
#                                        default to address,undefined, so one build serves both the
#                                        sanitized test suite and the fuzzers.
include_guard(GLOBAL)

set(PHOTON_SANITIZE "" CACHE STRING
    "Sanitizers for every target, as for -fsanitize= (address,undefined or thread)")
option(PHOTON_FUZZ "Build the libFuzzer targets of tests/fuzz (needs clang)" OFF)

if(PHOTON_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PHOTON_FUZZ needs clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(NOT PHOTON_SANITIZE)
    set(PHOTON_SANITIZE address,undefined)
  endif()
  # Coverage feedback for libFuzzer in every object; only the fuzz targets link its main().
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
  set(PHOTON_INSTRUMENTED_C_FLAGS -fsanitize=fuzzer-no-link)
endif()

if(PHOTON_SANITIZE)
  # A finding must fail the test that triggers it: no recovery, and frame pointers for the stacks.
  set(photon_sanitizer_flags -fsanitize=${PHOTON_SANITIZE} -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${photon_sanitizer_flags}>")
  add_link_options(${photon_sanitizer_flags})
  # C programs (the C example and header test) link the C++ parts of the runtimes too: the library
  # they use is C++ and instrumented.
  set(photon_c_link_flags -fsanitize-link-c++-runtime -Wl,--push-state,--no-as-needed,-lstdc++,--pop-state)
  add_link_options("$<$<LINK_LANGUAGE:C>:${photon_c_link_flags}>")
  # What a C program built outside CMake (the README example test) needs to link the library.
  list(APPEND PHOTON_INSTRUMENTED_C_FLAGS ${photon_sanitizer_flags} ${photon_c_link_flags})
  message(STATUS "photon: sanitizers ${PHOTON_SANITIZE}")
endif()
