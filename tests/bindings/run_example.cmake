# ctest driver: runs a language's example (COMMAND, arguments separated by '|') on MODEL and checks
# that it streamed a completion: stdout starts with the prompt and goes on, stderr has the summary
# (KIND=engine: an engine example's, which counts requests, tokens and steps).
string(REPLACE "|" ";" command "${COMMAND}")
set(prompt "Once upon a time")
execute_process(COMMAND ${command} ${MODEL} ${prompt} 8
  WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example failed (${rc}):\n${out}${err}")
endif()
string(FIND "${out}" "${prompt}" at)
string(LENGTH "${prompt}" prompt_length)
string(LENGTH "${out}" out_length)
if(NOT at EQUAL 0 OR NOT out_length GREATER prompt_length)
  message(FATAL_ERROR "the example's output does not continue the prompt:\n${out}")
endif()
set(summary "\\[[0-9]+ tokens, (recgen|hiergen), state [0-9]+ bytes\\]")
if(KIND STREQUAL "engine")
  set(summary "\\[[0-9]+ requests, [0-9]+ tokens, [0-9]+ steps\\]")
endif()
if(NOT err MATCHES "${summary}")
  message(FATAL_ERROR "the example printed no summary on stderr:\n${err}")
endif()
message(STATUS "example output: ${out}")

execute_process(COMMAND ${command} ${WORK_DIR}/missing.photon
  WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "missing.photon")
  message(FATAL_ERROR "missing model: expected exit code 1 naming the file, got ${rc}: ${err}")
endif()
