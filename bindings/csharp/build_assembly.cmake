# Compiles the SWIG-generated and hand-written C# sources into Photon.dll. Run with cmake -P;
# expects MCS, GENERATED_DIR, SOURCE_DIR and OUTPUT.
file(GLOB sources ${GENERATED_DIR}/*.cs ${SOURCE_DIR}/*.cs)
execute_process(COMMAND ${MCS} -target:library -warnaserror+ -nologo -out:${OUTPUT} ${sources}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mcs failed (${rc})")
endif()
