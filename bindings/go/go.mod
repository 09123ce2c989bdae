module photon.sdk/photon

go 1.19
