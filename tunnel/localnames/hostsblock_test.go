package localnames

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func hostLines(addr string, names ...string) []HostLine {
	return []HostLine{{netip.MustParseAddr(addr), names}}
}

// withBlock is content with pid's block holding lines.
func withBlock(content []byte, pid int, lines []HostLine) []byte {
	h := parseHosts(content)
	h.setBlock(pid, lines)
	return h.render()
}

func TestHostsBlock(t *testing.T) {
	machine := "127.0.0.1\tlocalhost\r\n10.0.0.5\tprinter\r\n"
	with := withBlock([]byte(machine), 42, hostLines("127.77.0.1", "web", "web.shop"))
	want := machine + "# >>> plug run, process 42: cluster names, removed when the run ends\r\n" +
		"127.77.0.1\tweb web.shop\r\n" +
		"# <<< plug run, process 42\r\n"
	if string(with) != want {
		t.Fatalf("with the block:\n%q\nwant\n%q", with, want)
	}
	other := withBlock(with, 7, hostLines("127.77.0.9", "web"))
	again := withBlock(other, 42, hostLines("127.77.0.2", "api"))
	if !strings.HasPrefix(string(again), machine+"# >>> plug run, process 42: cluster names, removed when the run ends\r\n127.77.0.2\tapi\r\n# <<< plug run, process 42\r\n# >>> plug run, process 7") {
		t.Fatalf("the block was not replaced where it was:\n%q", again)
	}
	if back := withBlock(withBlock(again, 42, nil), 7, nil); string(back) != machine {
		t.Fatalf("removing both blocks left:\n%q", back)
	}
	if held := parseHosts(other).heldBefore(7); held["web"] != 42 || held["web.shop"] != 42 {
		t.Fatalf("web is published first by 42, held: %v", held)
	}
}

// TestHostsBlockKeepsAMissingFinalLineEnd: a last line without a line end
// gets one of plug's while a block follows, and loses it with the block.
func TestHostsBlockKeepsAMissingFinalLineEnd(t *testing.T) {
	for _, machine := range []string{"127.0.0.1 localhost\n10.1.2.3 intranet.example", "127.0.0.1 localhost\r\n10.1.2.3 intranet.example", ""} {
		with := withBlock([]byte(machine), 5, hostLines("127.64.0.1", "web"))
		with = withBlock(with, 6, hostLines("127.64.0.2", "db"))
		if h := parseHosts(with); string(h.user) != machine || len(h.blocks) != 2 {
			t.Fatalf("%q read back as user %q, %d blocks", with, h.user, len(h.blocks))
		}
		if back := withBlock(withBlock(with, 5, nil), 6, nil); string(back) != machine {
			t.Fatalf("removing the blocks of %q left %q", with, back)
		}
	}
}

// TestHostsBlockDamaged: a block without its end marker, or with a damaged
// one, takes with it plug's lines only, never the user's below it.
func TestHostsBlockDamaged(t *testing.T) {
	user := "::1 localhost\n"
	below := "10.1.2.3 intranet.example\n# my comment\n127.64.0.9 mine\n"
	for name, file := range map[string]string{
		"no end marker":      user + "# >>> plug run, process 9: cluster names, removed when the run ends\n127.64.0.3\tdb\n" + below,
		"damaged end marker": user + "# >>> plug run, process 9: cluster names, removed when the run ends\n127.64.0.3\tdb\n# <<< plug run, procss 9\n" + below,
		"cut short":          user + below + "# >>> plug run, process 9: cluster names, removed when the run ends\n127.64.0.3\tdb\n127.64.",
	} {
		h := parseHosts([]byte(file))
		gone := h.dropBlocks(func(pid int) bool { return pid != 9 })
		want := user + below
		if name == "damaged end marker" {
			want = user + "# <<< plug run, procss 9\n" + below
		}
		if got := string(h.render()); got != want || !slices.Equal(gone, []int{9}) {
			t.Errorf("%s: left %q (gone %v), want %q", name, got, gone, want)
		}
	}
}

// FuzzHostsBlocks: whatever the file, taking plug's blocks out of it never
// takes out a line plug did not write (a marker, or a line of plug's
// addresses in a block), and what it keeps stays in order, byte for byte.
// The seeds run with go test; go test -fuzz FuzzHostsBlocks searches more.
func FuzzHostsBlocks(f *testing.F) {
	for _, seed := range []string{
		"127.0.0.1 localhost\n",
		"# >>> plug run, process 9: cluster names, removed when the run ends\n127.64.0.3\tdb\n10.0.0.1 x\n",
		"a\r\nb# >>> plug run, process 9: cluster names, removed when the run ends; plug ended the line above\r\n",
		"x\n# <<< plug run, process 3\n127.64.1.1\tweb\n# >>> plug run, process 3: cluster names, removed when the run ends\n127.100.0.0\t a\n127.64.",
		"user\n# >>> plug run, process 1: cluster names, removed when the run ends; plug ended the line above\n# <<< plug run, process 1\n",
	} {
		f.Add([]byte(seed), uint64(1))
	}
	f.Fuzz(func(t *testing.T, content []byte, seed uint64) {
		// Add blocks among the lines, some cut short, as a crash leaves them.
		r := rand.New(rand.NewPCG(seed, seed))
		var file []byte
		for _, line := range bytes.SplitAfter(content, []byte("\n")) {
			file = append(file, line...)
			if r.IntN(4) == 0 && bytes.HasSuffix(file, []byte("\n")) {
				block := withBlock(nil, 1+r.IntN(9), hostLines("127.64.0.1", "web", "web.ns"))
				file = append(file, block[:r.IntN(len(block)+1)]...)
			}
		}
		h := parseHosts(file)
		h.dropBlocks(func(int) bool { return false })
		out := h.render()
		userLines := func(b []byte) []string {
			var kept []string
			for _, l := range bytes.SplitAfter(b, []byte("\n")) {
				text := strings.TrimRight(string(l), "\r\n")
				if len(l) > 0 && !plugCouldWrite(text) {
					kept = append(kept, text)
				}
			}
			return kept
		}
		if in, kept := userLines(file), userLines(out); !slices.Equal(in, kept) {
			t.Fatalf("file %q\nkept %q\nits own lines were %q, now %q", file, out, in, kept)
		}
		if len(out) > len(file) || !isSubsequence(out, file) {
			t.Fatalf("file %q became %q: not only removals", file, out)
		}
	})
}

// plugCouldWrite reports whether a line may be one plug wrote: a marker, a
// line of an address of plug's range, or the beginning of one.
func plugCouldWrite(text string) bool {
	if text == "" {
		return false
	}
	if strings.HasPrefix(text, "# >>> plug run") || strings.HasPrefix(text, "# <<< plug run") ||
		strings.HasPrefix(blockBeginPrefix, text) || strings.HasPrefix(blockEndPrefix, text) {
		return true
	}
	addr, _, _ := strings.Cut(text, "\t")
	if strings.HasPrefix(addr, "127.") && strings.Trim(addr, "0123456789.") == "" {
		return true
	}
	return false
}

// isSubsequence reports whether a's bytes are b's, some left out.
func isSubsequence(a, b []byte) bool {
	for _, c := range a {
		i := bytes.IndexByte(b, c)
		if i < 0 {
			return false
		}
		b = b[i+1:]
	}
	return true
}
