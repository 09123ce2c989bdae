module photon-example

go 1.19

require photon v0.0.0

replace photon => ../../bindings/go
