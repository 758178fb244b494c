module plug/testdata/cluster

go 1.26.8

require plug v0.0.0

replace plug => ../..
