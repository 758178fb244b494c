module plug/testdata/ui

go 1.26.8

require (
	golang.org/x/crypto v0.59.0
	plug v0.0.0
)

require golang.org/x/sys v0.50.0 // indirect

replace plug => ../..
