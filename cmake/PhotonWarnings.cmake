# Warnings on everywhere; PHOTON_WERROR (set by .ci/run) makes them errors.
add_library(photon_warnings INTERFACE)
target_compile_options(photon_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${PHOTON_WERROR}>>:-Werror>)
