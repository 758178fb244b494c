package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var files embed.FS

// assets serves the page's files, every one embedded in the binary.
func assets() http.Handler {
	sub, err := fs.Sub(files, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	return http.FileServerFS(sub)
}
