//go:build linux

package smb

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkFold measures finding a name in a directory of 10,000 entries
// spelled as on disk and in another case (deploy/README.md quotes it):
//
//	go test -run '^$' -bench Fold ./smb/
func BenchmarkFold(b *testing.B) {
	dir := b.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "big"), 0755); err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		if err := os.WriteFile(filepath.Join(dir, "big", fmt.Sprintf("File-%05d.txt", i)), nil, 0644); err != nil {
			b.Fatal(err)
		}
	}
	r, err := openRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{
		{"exact", "big/File-05000.txt"},
		{"other-case", "BIG/file-05000.TXT"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if got := r.fold(c.path); got != "big/File-05000.txt" {
					b.Fatalf("fold(%q) = %q", c.path, got)
				}
			}
		})
	}
}
