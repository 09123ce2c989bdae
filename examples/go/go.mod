module photon-example

go 1.19

require photon.sdk/photon v0.0.0

replace photon.sdk/photon => ../../bindings/go
