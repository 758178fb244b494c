module plug/testdata/workload

go 1.26.8
