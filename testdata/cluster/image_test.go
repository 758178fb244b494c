package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// ociImage is dist/plug-image.oci.tar (./build.sh image), read into memory
// as its blobs by digest and its top index.json.
type ociImage struct {
	blobs map[string][]byte
	index []byte
}

func readOCIImage(t *testing.T) *ociImage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "dist", "plug-image.oci.tar"))
	if err != nil {
		clustertest.Unavailable(t, "no image index ("+err.Error()+"); run ./build.sh image")
	}
	defer f.Close()
	img := &ociImage{blobs: map[string][]byte{}}
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		switch name := strings.TrimPrefix(h.Name, "./"); {
		case name == "index.json":
			img.index = data
		case strings.HasPrefix(name, "blobs/sha256/") && h.Typeflag == tar.TypeReg:
			img.blobs["sha256:"+strings.TrimPrefix(name, "blobs/sha256/")] = data
		}
	}
	return img
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Platform  *struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	} `json:"platform"`
}

// blob decodes the JSON blob d names into v.
func (img *ociImage) blob(t *testing.T, d descriptor, v any) {
	t.Helper()
	data, ok := img.blobs[d.Digest]
	if !ok {
		t.Fatalf("the layout lacks the blob %s (%s)", d.Digest, d.MediaType)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", d.Digest, err)
	}
}

// agentOf returns the /plug of platform's image in the index.
func (img *ociImage) agentOf(t *testing.T, platform string) []byte {
	t.Helper()
	var top, index struct{ Manifests []descriptor }
	if err := json.Unmarshal(img.index, &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("index.json names %d descriptors (%v), want the one image index", len(top.Manifests), err)
	}
	img.blob(t, top.Manifests[0], &index)
	for _, m := range index.Manifests {
		if m.Platform == nil || m.Platform.OS+"/"+m.Platform.Architecture != platform {
			continue
		}
		var manifest struct{ Layers []descriptor }
		img.blob(t, m, &manifest)
		for _, l := range manifest.Layers {
			z, err := gzip.NewReader(bytes.NewReader(img.blobs[l.Digest]))
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			r := tar.NewReader(z)
			for {
				h, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatalf("layer %s: %v", l.Digest, err)
				}
				if h.Name == "./plug" {
					data, err := io.ReadAll(r)
					if err != nil {
						t.Fatal(err)
					}
					return data
				}
			}
		}
		t.Fatalf("the %s image has no /plug", platform)
	}
	t.Fatalf("the image index has no %s image", platform)
	return nil
}

// The image index holds a linux/amd64 and a linux/arm64 image, and the
// arm64 one's agent runs: `plug version` under qemu-aarch64-static says
// linux/arm64.
func TestImageIndexHoldsAnArm64AgentThatRuns(t *testing.T) {
	img := readOCIImage(t)
	if len(img.agentOf(t, "linux/amd64")) == 0 {
		t.Error("the linux/amd64 image's /plug is empty")
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		clustertest.Unavailable(t, "no qemu-aarch64-static (apt-get install qemu-user-static, as testdata/cluster/up.sh does)")
	}
	agent := filepath.Join(t.TempDir(), "plug")
	if err := os.WriteFile(agent, img.agentOf(t, "linux/arm64"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(qemu, agent, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " linux/arm64 ") {
		t.Fatalf("the arm64 agent's plug version under qemu: %v\n%s", err, out)
	}
	t.Logf("the arm64 agent says: %s", out)
}
