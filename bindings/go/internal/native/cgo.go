// Package native is the SWIG-generated layer (native.swigcxx) under package photon.
//
// It links against libphoton from the repository's build/ directory (the Quick start's); set
// CGO_LDFLAGS (e.g. "-L/path/lib -Wl,-rpath,/path/lib") to use another build, whose flags come
// first.
package native

// #cgo CPPFLAGS: -I${SRCDIR}/../../.. -I${SRCDIR}/../../../../include
// #cgo CXXFLAGS: -std=c++17
// #cgo LDFLAGS: -L${SRCDIR}/../../../../build/lib -lphoton
// #cgo LDFLAGS: -Wl,-rpath,${SRCDIR}/../../../../build/lib
import "C"
