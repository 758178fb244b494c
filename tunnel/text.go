package tunnel

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxPeerText is the most bytes PeerText returns.
const maxPeerText = 256

// PeerText makes s, a string a peer chose (an SSH user name, a key comment,
// a run id, a version, a reason), safe for one line of a log or of another
// developer's terminal: every byte that is not printable text is written as
// a Go escape (a line feed as \n, ESC as \x1b, a bidirectional override as
// \u202e, a byte that is not UTF-8 as \xff), so that the text can neither
// start a line of its own nor move a cursor or change a colour; and it is
// cut to at most 256 bytes, saying how many bytes were left out. Its result
// is printable and unchanged by a second PeerText.
func PeerText(s string) string {
	out := escapeText(s, false)
	if len(out) <= maxPeerText {
		return out
	}
	cut := maxPeerText - 24 // room for the note
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes more)", out[:cut], len(out)-cut)
}

// escapeText writes every rune of s that is not printable as a Go escape;
// with lines, line feeds are kept (a remedy to copy spans lines).
func escapeText(s string, lines bool) string {
	ok := func(r rune) bool {
		return r != utf8.RuneError && (r == ' ' || unicode.IsPrint(r) || lines && r == '\n')
	}
	clean := true
	for _, r := range s {
		if !ok(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case ok(r):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}
