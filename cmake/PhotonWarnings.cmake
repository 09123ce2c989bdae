# Warnings on everywhere; PHOTON_WERROR (set by scripts/test) makes them errors.
add_library(photon_warnings INTERFACE)
target_compile_options(photon_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
  # GCC 12 reports -Wrestrict inside libstdc++ for `"text" + std::string` (GCC bug 105329).
  $<$<AND:$<COMPILE_LANG_AND_ID:CXX,GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
  # Clang reports `omp simd` loops it did not vectorize, which is every one below -O2 (the
  # sanitizer builds use -O1): a hint not taken, not a fault.
  $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wno-pass-failed>
  $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${PHOTON_WERROR}>>:-Werror>)
