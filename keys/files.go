package keys

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// ensureDirs creates the store's root and its subdirectory sub with mode
// 0700, and tightens them to 0700 if they already exist.
func (s Store) ensureDirs(sub string) error {
	if err := os.MkdirAll(sub, 0o700); err != nil {
		return err
	}
	for _, d := range []string{s.dir, sub} {
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// writeFile replaces path with data, with the given mode, atomically: a
// reader sees the old content or the new one, never a part. The directory
// must exist.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// exists reports whether path is there; errors other than "not there"
// count as there, so nothing is overwritten on a doubt.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
