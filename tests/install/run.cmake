# ctest driver of install_package; expects BUILD_DIR, WORK_DIR, CONSUMER_DIR, EXAMPLE, C_COMPILER
# and GENERATOR.
set(prefix ${WORK_DIR}/prefix)
set(model ${WORK_DIR}/model.photon)
set(prompt "Once upon a time")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(JOIN " " command ${ARGN})
    message(FATAL_ERROR "${command} failed (${rc}):\n${out}${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

# Streams a completion with a built example and checks that it continues the prompt.
function(check_stream label executable)
  run(${executable} ${model} ${prompt} 8)
  string(FIND "${out}" "${prompt}" at)
  string(LENGTH "${out}" out_length)
  if(NOT at EQUAL 0 OR out_length LESS 20)
    message(FATAL_ERROR "${label}: the output does not continue the prompt:\n${out}")
  endif()
  message(STATUS "${label}: ${out}")
endfunction()

file(REMOVE_RECURSE ${prefix} ${WORK_DIR}/find_package ${WORK_DIR}/pkg-config)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# The layout: header, library with its SONAME links, CMake package, pkg-config file, CLI.
file(GLOB libraries ${prefix}/lib*/libphoton.so ${prefix}/lib*/*/libphoton.so)
list(LENGTH libraries found)
if(NOT found EQUAL 1 OR NOT EXISTS ${prefix}/include/photon.h OR NOT EXISTS ${prefix}/bin/photon)
  message(FATAL_ERROR "incomplete installation under ${prefix}: ${libraries}")
endif()
get_filename_component(libdir ${libraries} DIRECTORY)
foreach(file libphoton.so.0 cmake/photon/photonConfig.cmake cmake/photon/photonConfigVersion.cmake
             pkgconfig/photon.pc)
  if(NOT EXISTS ${libdir}/${file})
    message(FATAL_ERROR "not installed: ${libdir}/${file}")
  endif()
endforeach()
run(readelf -d ${libdir}/libphoton.so.0)
if(NOT out MATCHES "Library soname: \\[libphoton\\.so\\.0\\]")
  message(FATAL_ERROR "libphoton.so.0 does not have the SONAME libphoton.so.0:\n${out}")
endif()

# The installed CLI writes the model (it finds the installed library through its RPATH).
run(${prefix}/bin/photon init --preset photon-small --seed 1 -o ${model})

# 1. find_package(photon) -> photon::photon.
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/find_package -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER} -DEXAMPLE=${EXAMPLE})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/find_package)
check_stream("find_package(photon)" ${WORK_DIR}/find_package/stream)

# 2. pkg-config.
set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
run(pkg-config --modversion photon)
string(STRIP "${out}" version)
if(NOT version VERSION_GREATER_EQUAL 0.1)
  message(FATAL_ERROR "pkg-config reports version '${version}'")
endif()
run(pkg-config --cflags --libs photon)
separate_arguments(flags UNIX_COMMAND "${out}")
file(MAKE_DIRECTORY ${WORK_DIR}/pkg-config)
run(${C_COMPILER} -std=c11 -Wall -Wextra -Werror ${EXAMPLE} ${flags} -Wl,-rpath,${libdir}
    -o ${WORK_DIR}/pkg-config/stream)
check_stream("pkg-config photon" ${WORK_DIR}/pkg-config/stream)
file(REMOVE ${model})
