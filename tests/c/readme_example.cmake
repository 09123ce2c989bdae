# ctest driver: the README's C example (its first ```c block), compiled warning-free with
# -Wall -Wextra -Werror against the built library, must run on the shipped model and continue the
# prompt. Expects README, C_COMPILER, INCLUDE_DIR, LIBRARY_DIR, MODEL and WORK_DIR; EXTRA_FLAGS (a list)
# is what linking an instrumented library needs in a sanitizer build.
file(READ ${README} readme)
string(REGEX MATCH "```c\n([^`]*)```" block "${readme}")
if(NOT block)
  message(FATAL_ERROR "no ```c block in ${README}")
endif()
file(WRITE ${WORK_DIR}/readme_example.c "${CMAKE_MATCH_1}")
execute_process(COMMAND ${C_COMPILER} -std=c11 -Wall -Wextra -Werror -I${INCLUDE_DIR}
                        ${WORK_DIR}/readme_example.c -L${LIBRARY_DIR} -lphoton
                        -Wl,-rpath,${LIBRARY_DIR} ${EXTRA_FLAGS} -o ${WORK_DIR}/readme_example
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README's C example does not compile cleanly:\n${out}${err}")
endif()
execute_process(COMMAND ${WORK_DIR}/readme_example ${MODEL}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(LENGTH "${out}" length)
if(NOT rc EQUAL 0 OR length LESS 40)
  message(FATAL_ERROR "the README's C example failed (${rc}):\n${out}${err}")
endif()
message(STATUS "README example: ${out}")
