module plug/testdata/swarm

go 1.26.8
