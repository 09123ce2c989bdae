# Installation for C and C++ consumers: `cmake --install` puts photon.h, libphoton (with its
# versioned SONAME), the photon CLI, a CMake package (find_package(photon) gives photon::photon),
# a pkg-config file (photon.pc) and the shipped model (share/photon/models) under the prefix; the
# bindings install their packages from bindings/. Everything is relocatable.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PHOTON_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/photon)

install(TARGETS photon EXPORT photonTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
install(FILES ${PROJECT_SOURCE_DIR}/include/photon.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development)
install(FILES ${PROJECT_SOURCE_DIR}/models/photon-kjv.photon
  DESTINATION ${CMAKE_INSTALL_DATADIR}/photon/models COMPONENT Runtime)
if(TARGET photon_cli)
  # The installed CLI finds the installed library wherever the prefix is moved.
  file(RELATIVE_PATH cli_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(photon_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${cli_to_lib}")
  install(TARGETS photon_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
endif()

install(EXPORT photonTargets NAMESPACE photon:: DESTINATION ${PHOTON_CMAKE_PACKAGE_DIR}
  COMPONENT Development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/photonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/photonConfig.cmake INSTALL_DESTINATION ${PHOTON_CMAKE_PACKAGE_DIR})
# The ABI only grows (photon.h), and the SONAME carries the major version.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/photonConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/photonConfig.cmake ${PROJECT_BINARY_DIR}/photonConfigVersion.cmake
  DESTINATION ${PHOTON_CMAKE_PACKAGE_DIR} COMPONENT Development)

# pkg-config: the prefix is found from the .pc file's own location.
file(RELATIVE_PATH PHOTON_PC_TO_PREFIX
  ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" PHOTON_PC_TO_PREFIX "${PHOTON_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/photon.pc.in ${PROJECT_BINARY_DIR}/photon.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/photon.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT Development)
