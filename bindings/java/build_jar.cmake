# Compiles the SWIG-generated and hand-written Java sources and packs them, with the native
# libraries, into photon.jar. Run with cmake -P; expects JAVAC, JAR, GENERATED_DIR, SOURCE_DIR,
# CLASSES_DIR, JNI_LIBRARY, PHOTON_LIBRARY, PHOTON_SONAME and OUTPUT, and CUDA_MODULE (the GPU
# module libphoton-cuda.so) in a CUDA build.
file(GLOB sources ${GENERATED_DIR}/*.java ${SOURCE_DIR}/com/photon/*.java)
file(REMOVE_RECURSE ${CLASSES_DIR})
file(MAKE_DIRECTORY ${CLASSES_DIR}/com/photon/native)
execute_process(COMMAND ${JAVAC} -encoding UTF-8 -Xlint:all -Werror -d ${CLASSES_DIR} ${sources}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac failed (${rc})")
endif()
# NativeLoader finds them as resources next to its class.
file(COPY_FILE ${PHOTON_LIBRARY} ${CLASSES_DIR}/com/photon/native/${PHOTON_SONAME})
file(COPY_FILE ${JNI_LIBRARY} ${CLASSES_DIR}/com/photon/native/libphoton_jni.so)
if(CUDA_MODULE)
  file(COPY_FILE ${CUDA_MODULE} ${CLASSES_DIR}/com/photon/native/libphoton-cuda.so)
endif()
execute_process(COMMAND ${JAR} cf ${OUTPUT} -C ${CLASSES_DIR} . RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "jar failed (${rc})")
endif()
