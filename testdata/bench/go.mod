module plug/testdata/bench

go 1.26.8
