// Package native is the SWIG-generated layer (native.swigcxx) under package photon.
//
// It builds against the installed PHOTON library found by pkg-config (set PKG_CONFIG_PATH to
// PREFIX/lib/pkgconfig). At run time the program finds libphoton.so.0 through an rpath
// (CGO_LDFLAGS="-Wl,-rpath,PREFIX/lib" when building) or LD_LIBRARY_PATH.
package native

// #cgo pkg-config: photon
// #cgo CPPFLAGS: -I${SRCDIR}
// #cgo CXXFLAGS: -std=c++17
import "C"
