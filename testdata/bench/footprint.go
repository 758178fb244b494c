package main

import (
	"compress/gzip"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// footprint writes CSV rows "-,footprint,METRIC,VALUE" for plug's size: each
// binary in -dist, the agent image of each architecture (its archive, and
// gzip-compressed as a registry would carry it), the image index (OCI
// archive), what the installer downloads for linux/amd64, and the packages outside the standard library
// that the plug binary is built from (go list -deps of -module).
func footprint(args []string) error {
	fs := flag.NewFlagSet("footprint", flag.ExitOnError)
	dist := fs.String("dist", "dist", "the directory of build.sh's binaries and image")
	module := fs.String("module", ".", "the main module's directory")
	fs.Parse(args)
	out := csv.NewWriter(os.Stdout)
	defer out.Flush()
	row := func(metric string, v int64) {
		out.Write([]string{"-", "footprint", metric, strconv.FormatInt(v, 10)})
	}
	bins, _ := filepath.Glob(filepath.Join(*dist, "plug-*-*"))
	if len(bins) == 0 {
		return fmt.Errorf("no binaries in %s: run ./build.sh binaries", *dist)
	}
	for _, b := range bins {
		st, err := os.Stat(b)
		if err != nil {
			return err
		}
		platform := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(b), "plug-"), ".exe")
		row("binary "+strings.Replace(platform, "-", "/", 1), st.Size())
	}
	for metric, file := range map[string]string{"image": "plug-image.tar", "image arm64": "plug-image.arm64.tar"} {
		image := filepath.Join(*dist, file)
		st, err := os.Stat(image)
		if err != nil {
			return err
		}
		row(metric, st.Size())
		compressed, err := gzipSize(image)
		if err != nil {
			return err
		}
		row(metric+" gzip", compressed)
	}
	for metric, file := range map[string]string{"image index": "plug-image.oci.tar", "installer download linux/amd64": "gz/plug-linux-amd64.gz"} {
		st, err := os.Stat(filepath.Join(*dist, file))
		if err != nil {
			return err
		}
		row(metric, st.Size())
	}

	list := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	list.Dir = *module
	list.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64")
	pkgs, err := output(list)
	if err != nil {
		return err
	}
	counts := map[string]int64{}
	for _, p := range strings.Fields(pkgs) {
		switch {
		case p == "plug" || strings.HasPrefix(p, "plug/"):
			counts["plug"]++
		case strings.HasPrefix(p, "golang.org/x/crypto/"):
			counts["golang.org/x/crypto"]++
		case strings.HasPrefix(p, "golang.org/x/sys/"):
			counts["golang.org/x/sys"]++
		default:
			counts["other"]++
		}
	}
	row("packages outside the standard library", counts["golang.org/x/crypto"]+counts["golang.org/x/sys"]+counts["other"])
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		row("packages "+k, counts[k])
	}
	if counts["other"] > 0 {
		return errors.New("the plug binary depends on packages outside the standard library, golang.org/x/crypto and golang.org/x/sys")
	}
	return nil
}

// gzipSize is the size of path compressed with gzip's default level.
func gzipSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n countWriter
	z := gzip.NewWriter(&n)
	if _, err := io.Copy(z, f); err != nil {
		return 0, err
	}
	if err := z.Close(); err != nil {
		return 0, err
	}
	return int64(n), nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
