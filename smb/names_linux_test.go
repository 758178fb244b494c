//go:build linux

package smb_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readDir is the sorted names in dir, and what each regular file holds.
func readDir(t *testing.T, dir string) ([]string, map[string]string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	data := map[string]string{}
	for _, e := range ents {
		names = append(names, e.Name())
		if e.Type().IsRegular() {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			data[e.Name()] = string(b)
		}
	}
	slices.Sort(names)
	return names, data
}

// TestCaseInsensitiveNames: names are found whatever their case, keep the
// case they were created with, and create dispositions act on the file a
// name finds, as on Windows.
func TestCaseInsensitiveNames(t *testing.T) {
	s := startServer(t)
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(s.dir, name)
		os.MkdirAll(filepath.Dir(p), 0755)
		if err := os.WriteFile(p, []byte(data), 0644); err != nil {
			t.Fatal(err)
		}
	}
	write("Readme.TXT", "readme")
	write("Docs/Guide.md", "guide")
	write("Ωmega.txt", "omega")
	// Two names that differ only in case, made on disk.
	write("dup.txt", "lower")
	write("DUP.txt", "upper")
	// A link out of the share, found in another case, still leads nowhere.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("outside the share"), 0644)
	if err := os.Symlink(outside, filepath.Join(s.dir, "Outdir")); err != nil {
		t.Fatal(err)
	}

	out := s.mustImpacket(t, `
from impacket.smb3structs import FILE_CREATE, FILE_OPEN, FILE_OVERWRITE_IF, FILE_READ_DATA, FILE_WRITE_DATA
def get(name):
    buf = io.BytesIO(); conn.getFile(share, name, buf.write); return buf.getvalue().decode()
def put(name, data):
    conn.putFile(share, name, io.BytesIO(data.encode()).read)
tid = conn.connectTree(share)
print('get', get('README.txt'))
print('dir', get('docs\\GUIDE.MD'))
print('unicode', get('ωMEGA.TXT'))
print('dup exact', get('dup.txt'), get('DUP.txt'))
print('dup folded', get('Dup.Txt'))
for name in ['OUTDIR\\secret.txt', 'outdir\\SECRET.TXT']:
    try:
        print('ESCAPED', get(name))
    except SessionError as e:
        print('out refused', e.getErrorString()[0])
try:
    conn.createFile(tid, 'readme.txt', desiredAccess=FILE_READ_DATA | FILE_WRITE_DATA, creationDisposition=FILE_CREATE)
    print('create: ALLOWED')
except SessionError as e:
    print('create:', e.getErrorString()[0])
fid = conn.createFile(tid, 'README.TXT', desiredAccess=FILE_READ_DATA | FILE_WRITE_DATA, creationDisposition=FILE_OVERWRITE_IF)
conn.writeFile(tid, fid, b'overwritten')
conn.closeFile(tid, fid)
put('DOCS\\new.txt', 'new')
print('listed', [f.get_longname() for f in conn.listPath(share, 'readme.txt')])
print('listed dir', [f.get_longname() for f in conn.listPath(share, 'docs\\guide.md')])
conn.rename(share, 'readme.txt', 'README.txt')
conn.rename(share, 'docs', 'DOCS')
try:
    conn.createFile(tid, 'docs\\missing\\x.txt', creationDisposition=FILE_OPEN)
except SessionError as e:
    print('missing dir:', e.getErrorString()[0])
`)
	for _, want := range []string{
		"get readme\n", "dir guide\n", "unicode omega\n", "dup exact lower upper\n",
		// Of names that differ only in case, the first in byte order.
		"dup folded upper\n",
		"create: STATUS_OBJECT_NAME_COLLISION\n",
		"listed ['Readme.TXT']\n", "listed dir ['Guide.md']\n",
		"missing dir: STATUS_OBJECT_PATH_NOT_FOUND\n",
		"out refused STATUS_ACCESS_DENIED\nout refused STATUS_ACCESS_DENIED\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ESCAPED") {
		t.Errorf("a file outside the share was read:\n%s", out)
	}
	names, data := readDir(t, s.dir)
	if want := []string{"DOCS", "DUP.txt", "Outdir", "README.txt", "dup.txt", "Ωmega.txt"}; !slices.Equal(names, want) {
		t.Errorf("share holds %q, want %q", names, want)
	}
	if data["README.txt"] != "overwritten" {
		t.Errorf("README.txt holds %q, want what the overwrite through README.TXT wrote", data["README.txt"])
	}
	names, _ = readDir(t, filepath.Join(s.dir, "DOCS"))
	if want := []string{"Guide.md", "new.txt"}; !slices.Equal(names, want) {
		t.Errorf("DOCS holds %q, want %q", names, want)
	}
}

// TestPodSymlinks: symbolic links made on disk (node_modules/.bin,
// virtualenvs) are listed, dangling ones and ones that lead out of the
// share too, and deleting one deletes the link, never what it leads to, so
// a directory of links can be removed.
func TestPodSymlinks(t *testing.T) {
	s := startServer(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("outside the share"), 0644)
	os.MkdirAll(filepath.Join(s.dir, "lib"), 0755)
	os.WriteFile(filepath.Join(s.dir, "lib", "tool.js"), []byte("tool"), 0644)
	os.MkdirAll(filepath.Join(s.dir, "bin"), 0755)
	for link, target := range map[string]string{
		"bin/tool":    "../lib/tool.js",
		"bin/libdir":  "../lib",
		"bin/gone":    "missing",
		"bin/out":     filepath.Join(outside, "secret.txt"),
		"bin/outdir":  outside,
		"bin/loop":    "loop",
		"single":      "lib/tool.js",
		"single-gone": "nowhere",
	} {
		if err := os.Symlink(target, filepath.Join(s.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	local := t.TempDir()
	out := s.mustSmbclient(t, local, `ls bin\*`)
	for _, name := range []string{"tool", "libdir", "gone", "out", "outdir", "loop"} {
		if !strings.Contains(out, "  "+name+" ") {
			t.Errorf("bin\\%s is not listed:\n%s", name, out)
		}
	}
	if out, _ := s.smbclient(t, local, `get bin\out; get bin\outdir\secret.txt`); !strings.Contains(out, "NT_STATUS_ACCESS_DENIED") {
		t.Errorf("a link out of the share was followed:\n%s", out)
	}
	// A link to a directory is listed as that directory (a client that
	// deletes a tree descends into it); removing it removes the link.
	s.mustSmbclient(t, local, `rmdir bin\libdir; del single; del single-gone; deltree bin`)
	names, _ := readDir(t, s.dir)
	if want := []string{"lib"}; !slices.Equal(names, want) {
		t.Errorf("share holds %q after deleting the links, want %q", names, want)
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, "lib", "tool.js")); err != nil || string(b) != "tool" {
		t.Errorf("what a deleted link led to is gone: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret.txt")); err != nil || string(b) != "outside the share" {
		t.Errorf("the file outside the share changed: %q %v", b, err)
	}
}

// TestWindowsIllegalNames: names made in the pod with characters Windows
// forbids, or with bytes that are not UTF-8, are listed with the private
// use characters macOS and Samba's catia map them to, and those names
// open, rename and create the same names on disk.
func TestWindowsIllegalNames(t *testing.T) {
	s := startServer(t)
	onDisk := map[string]string{
		"a:b.txt": "colon", "what?": "question", `back\slash`: "backslash", "p|i<p>e*": "pipe",
		"q\"uote": "quote", "tab\there": "control", "bad\xffbyte": "latin1",
	}
	for name, data := range onDisk {
		if err := os.WriteFile(filepath.Join(s.dir, name), []byte(data), 0644); err != nil {
			t.Fatal(err)
		}
	}
	out := s.mustImpacket(t, `
def get(name):
    buf = io.BytesIO(); conn.getFile(share, name, buf.write); return buf.getvalue().decode()
shown = sorted(f.get_longname() for f in conn.listPath(share, '*') if f.get_longname() not in ('.', '..'))
for n in shown:
    print('listed', n.encode('unicode_escape').decode(), get(n))
print('pattern', [f.get_longname().encode('unicode_escape').decode() for f in conn.listPath(share, 'a\uf022*')])
conn.putFile(share, 'new\uf025\uf022.txt', io.BytesIO(b'made').read)
conn.rename(share, 'a\uf022b.txt', 'c\uf027d.txt')
`)
	for _, want := range []string{
		`listed a\uf022b.txt colon`, `listed what\uf025 question`, `listed back\uf026slash backslash`,
		`listed p\uf027i\uf023p\uf024e\uf021 pipe`, `listed q\uf020uote quote`, `listed tab\uf009here control`,
		`listed bad\uf2ffbyte latin1`, `pattern ['a\\uf022b.txt']`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	names, data := readDir(t, s.dir)
	if want := []string{`back\slash`, "bad\xffbyte", "c|d.txt", "new?:.txt", "p|i<p>e*", "q\"uote", "tab\there", "what?"}; !slices.Equal(names, want) {
		t.Errorf("share holds %q, want %q", names, want)
	}
	if data["c|d.txt"] != "colon" || data["new?:.txt"] != "made" {
		t.Errorf("renamed file holds %q, created one %q", data["c|d.txt"], data["new?:.txt"])
	}
}
