package localnames

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Where a run cannot have a hosts file of its own (macOS, Windows), it
// writes its names into the machine's hosts file, in a block of its own
// that starts and ends with a marker line naming the run's process:
//
//	# >>> plug run, process 4242: cluster names, removed when the run ends
//	127.77.0.1	web web.shop web.shop.svc web.shop.svc.cluster.local
//	# <<< plug run, process 4242
//
// The blocks come after every line of the file that plug did not write,
// in the order the runs first wrote them: the machine's own lines are
// never moved or rewritten by a change of the blocks, and a host name
// several runs publish is answered by the first of them (resolvers take
// the first line that names a host). A file whose last line has no line
// end gets one before the first block, and that block's begin marker says
// so (blockJoinedSuffix), so that removing the blocks gives the file back
// byte for byte. The line end of the blocks is the file's own: CRLF on a
// Windows hosts file.
//
// Reading is defensive: a block ends at its end marker, or else at the
// first line that plug would not have written in it (a line that is not
// ADDRESS<TAB>NAMES with an address of plug's loopback range), which stays
// the user's; an end marker without its block is dropped; a cut-short last
// line of a block (a write that a crash interrupted) is dropped only when
// it is the beginning of a line plug writes.

const (
	blockBeginPrefix  = "# >>> plug run, process "
	blockBeginSuffix  = ": cluster names, removed when the run ends"
	blockJoinedSuffix = blockBeginSuffix + "; plug ended the line above"
	blockEndPrefix    = "# <<< plug run, process "
)

// plugRange holds every address a run gives a name (127.64.0.0/10, the
// pool of Linux and Windows, which holds macOS's 127.77.0.0/24).
var plugRange = netip.MustParsePrefix("127.64.0.0/10")

// hostsBlock is one run's block.
type hostsBlock struct {
	pid   int
	lines []string // ADDRESS<TAB>NAMES, without line ends
}

// hostsContent is a hosts file taken apart.
type hostsContent struct {
	user   []byte       // every byte plug did not write, in order
	blocks []hostsBlock // the runs' blocks, in the file's order
	eol    string       // the file's line end
}

// parseHosts takes content apart; render puts it back together, with the
// blocks after the user's lines.
func parseHosts(content []byte) hostsContent {
	h := hostsContent{eol: lineEnding(content)}
	var cur *hostsBlock // the block being read
	lastUser := true    // the line before went to user
	joinAt, joinEOL := -1, ""
	for _, line := range bytes.SplitAfter(content, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		text := strings.TrimRight(string(line), "\r\n")
		ended := line[len(line)-1] == '\n'
		if pid, joined, ok := beginMarker(text); ok {
			if joined && lastUser {
				joinAt, joinEOL = len(h.user), lineEndOf(line, h.eol)
			}
			h.blocks = append(h.blocks, hostsBlock{pid: pid})
			cur, lastUser = &h.blocks[len(h.blocks)-1], false
			continue
		}
		if pid, ok := markerPID(text, blockEndPrefix, ""); ok {
			if cur != nil && cur.pid == pid {
				cur = nil
			}
			lastUser = false
			continue
		}
		if cur != nil {
			if isPlugHostLine(text) {
				cur.lines = append(cur.lines, text)
				continue
			}
			if !ended && isCutPlugLine(text, cur.pid) {
				continue
			}
			cur = nil // a damaged block: the rest is the user's
		}
		h.user = append(h.user, line...)
		lastUser = true
	}
	if joinAt == len(h.user) { // no line of the user's came after
		h.user = trimLineEnd(h.user, joinEOL)
	}
	return h
}

// render is the file: the user's lines, then the blocks.
func (h hostsContent) render() []byte {
	out := bytes.Clone(h.user)
	joined := h.joined()
	if joined {
		out = append(out, h.eol...)
	}
	for i, b := range h.blocks {
		suffix := blockBeginSuffix
		if i == 0 && joined {
			suffix = blockJoinedSuffix
		}
		out = fmt.Appendf(out, "%s%d%s%s", blockBeginPrefix, b.pid, suffix, h.eol)
		for _, l := range b.lines {
			out = append(append(out, l...), h.eol...)
		}
		out = fmt.Appendf(out, "%s%d%s", blockEndPrefix, b.pid, h.eol)
	}
	return out
}

// joined reports whether the blocks start with a line end of plug's: the
// user's last line has none.
func (h hostsContent) joined() bool {
	return len(h.blocks) > 0 && len(h.user) > 0 && h.user[len(h.user)-1] != '\n'
}

// blocksStart is where render's blocks start, past the line end plug adds
// after the user's last line.
func (h hostsContent) blocksStart() int {
	if h.joined() {
		return len(h.user) + len(h.eol)
	}
	return len(h.user)
}

// setBlock makes lines the block of pid, where its block is, else after
// the others; no lines removes it.
func (h *hostsContent) setBlock(pid int, lines []HostLine) {
	text := make([]string, len(lines))
	for i, l := range lines {
		text[i] = l.Addr.String() + "\t" + strings.Join(l.Names, " ")
	}
	var blocks []hostsBlock
	placed := len(lines) == 0
	for _, b := range h.blocks {
		if b.pid != pid {
			blocks = append(blocks, b)
		} else if !placed {
			blocks, placed = append(blocks, hostsBlock{pid, text}), true
		}
	}
	if !placed {
		blocks = append(blocks, hostsBlock{pid, text})
	}
	h.blocks = blocks
}

// dropBlocks removes the blocks of the processes keep does not keep, and
// returns those processes.
func (h *hostsContent) dropBlocks(keep func(pid int) bool) []int {
	var kept []hostsBlock
	var gone []int
	for _, b := range h.blocks {
		if keep(b.pid) {
			kept = append(kept, b)
		} else {
			gone = append(gone, b.pid)
		}
	}
	h.blocks = kept
	return gone
}

// heldBefore is, for every host name of a block before pid's (of every
// other block when pid has none), the process of the first block naming
// it: the run that answers it.
func (h hostsContent) heldBefore(pid int) map[string]int {
	held := map[string]int{}
	for _, b := range h.blocks {
		if b.pid == pid {
			break
		}
		for _, l := range b.lines {
			_, names, _ := strings.Cut(l, "\t")
			for _, n := range strings.Fields(names) {
				if _, ok := held[n]; !ok {
					held[n] = b.pid
				}
			}
		}
	}
	return held
}

// beginMarker reads a begin marker line: its process, and whether plug
// added a line end before it.
func beginMarker(text string) (pid int, joined, ok bool) {
	if pid, ok := markerPID(text, blockBeginPrefix, blockJoinedSuffix); ok {
		return pid, true, true
	}
	pid, ok = markerPID(text, blockBeginPrefix, blockBeginSuffix)
	return pid, false, ok
}

// markerPID reads the process id of a marker line.
func markerPID(line, prefix, suffix string) (int, bool) {
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, suffix)
	if !ok || rest == "" || rest[0] == '+' || rest[0] == '-' {
		return 0, false
	}
	pid, err := strconv.Atoi(rest)
	return pid, err == nil && pid > 0
}

// isPlugHostLine reports whether text is a line plug writes in a block:
// an address of plug's range, a tab, names.
func isPlugHostLine(text string) bool {
	addr, names, ok := strings.Cut(text, "\t")
	if !ok || strings.TrimSpace(names) == "" {
		return false
	}
	a, err := netip.ParseAddr(addr)
	return err == nil && plugRange.Contains(a)
}

// isCutPlugLine reports whether text, the file's last line, without a
// line end, is the beginning of a line plug writes in the block of pid.
func isCutPlugLine(text string, pid int) bool {
	if text == "" {
		return false
	}
	if strings.HasPrefix(blockEndPrefix+strconv.Itoa(pid), text) || strings.HasPrefix(blockBeginPrefix, text) {
		return true
	}
	addr, _, tab := strings.Cut(text, "\t")
	if tab {
		a, err := netip.ParseAddr(addr)
		return err == nil && plugRange.Contains(a)
	}
	// A cut address: 127.64.0.0/10 is 127.64. to 127.127.
	return strings.HasPrefix(addr, "127.") && strings.Trim(addr, "0123456789.") == "" &&
		isPlugSecondOctet(addr[len("127."):])
}

// isPlugSecondOctet reports whether s starts with 64 to 127 and a dot.
func isPlugSecondOctet(s string) bool {
	octet, _, dot := strings.Cut(s, ".")
	n, err := strconv.Atoi(octet)
	return dot && err == nil && n >= 64 && n <= 127
}

// lineEnding is the file's own: CRLF on a Windows hosts file.
func lineEnding(content []byte) string {
	if bytes.Contains(content, []byte("\r\n")) {
		return "\r\n"
	}
	return "\n"
}

// lineEndOf is the line end of line, or eol when it has none.
func lineEndOf(line []byte, eol string) string {
	switch {
	case bytes.HasSuffix(line, []byte("\r\n")):
		return "\r\n"
	case bytes.HasSuffix(line, []byte("\n")):
		return "\n"
	}
	return eol
}

// trimLineEnd removes eol from the end of b, if it is there after a last
// line that is not empty: plug adds one only there.
func trimLineEnd(b []byte, eol string) []byte {
	rest, ok := bytes.CutSuffix(b, []byte(eol))
	if !ok || len(rest) == 0 || rest[len(rest)-1] == '\n' {
		return b
	}
	return rest
}
