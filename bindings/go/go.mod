module photon

go 1.19
