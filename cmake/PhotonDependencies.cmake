# Every dependency comes from a Debian package (scripts/install-deps installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(FlatBuffers REQUIRED CONFIG)
find_program(FLATC flatc REQUIRED)

pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

# flatc-generated headers for every schema in schemas/.
file(GLOB PHOTON_SCHEMAS ${CMAKE_SOURCE_DIR}/schemas/*.fbs)
set(PHOTON_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
set(PHOTON_GENERATED_HEADERS)
foreach(schema ${PHOTON_SCHEMAS})
  get_filename_component(stem ${schema} NAME_WE)
  set(out ${PHOTON_GENERATED_DIR}/${stem}_generated.h)
  add_custom_command(OUTPUT ${out}
    COMMAND ${FLATC} --cpp --scoped-enums --gen-mutable -o ${PHOTON_GENERATED_DIR} ${schema}
    DEPENDS ${schema} COMMENT "flatc ${stem}.fbs")
  list(APPEND PHOTON_GENERATED_HEADERS ${out})
endforeach()
add_custom_target(photon_schemas DEPENDS ${PHOTON_GENERATED_HEADERS})
