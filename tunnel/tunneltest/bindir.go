package tunneltest

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"
)

// WriteBinary stores binary in an agent's BinDir dir as the image does:
// gzipped, as dir/name.gz (name is plug-OS-ARCH[.exe]).
func WriteBinary(t testing.TB, dir, name string, binary []byte) {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write(binary)
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".gz"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
