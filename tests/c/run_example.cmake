# ctest driver: writes a small random model with the CLI and streams a completion from it with the
# C or C++ example (callback, pull API, save and restore). Expects PHOTON, EXAMPLE (executables),
# NAME and WORK_DIR.
set(model ${WORK_DIR}/${NAME}.photon)
set(prompt "Once upon a time")

execute_process(COMMAND ${PHOTON} init --preset photon-small --seed 1 -o ${model}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "photon init failed (${rc}):\n${out}${err}")
endif()

execute_process(COMMAND ${EXAMPLE} ${model} ${prompt} 16
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example failed (${rc}):\n${out}${err}")
endif()
string(FIND "${out}" "${prompt}" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "the example's output does not start with the prompt:\n${out}")
endif()
if(NOT err MATCHES "\\[[0-9]+ tokens, (recgen|hiergen), state [0-9]+ bytes\\]")
  message(FATAL_ERROR "the example printed no summary on stderr:\n${err}")
endif()
message(STATUS "example output: ${out}")

# Misuse: a usage error (2) and a missing model (1), each with a message, never a signal.
execute_process(COMMAND ${EXAMPLE} ${model} ${prompt} 16 extra RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "usage")
  message(FATAL_ERROR "too many arguments: expected exit code 2 and a usage line, got ${rc}: ${err}")
endif()
execute_process(COMMAND ${EXAMPLE} ${WORK_DIR}/missing.photon RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "missing.photon")
  message(FATAL_ERROR "missing model: expected exit code 1 naming the file, got ${rc}: ${err}")
endif()
file(REMOVE ${model})
