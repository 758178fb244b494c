package kubeplatform

import (
	"strings"
	"unicode/utf8"
)

// expandRefs replaces the $(NAME) references in value the way the kubelet
// expands a container's env values:
//
//   - $(NAME) becomes lookup(NAME) when lookup knows NAME, and stays as
//     written, "$(NAME)", when it does not;
//   - $$ is an escaped $, and becomes one $ (so $$(NAME) is the literal
//     text "$(NAME)");
//   - a $ before anything else is kept with what follows it; a $( that is
//     never closed is kept as is, and so is a $ that ends the value.
//
// An invalid UTF-8 sequence right after a $ becomes U+FFFD, as the kubelet
// decodes that one rune.
func expandRefs(value string, lookup func(name string) (string, bool)) string {
	if !strings.Contains(value, "$") {
		return value
	}
	var b strings.Builder
	i := 0
	for i < len(value) {
		c := value[i]
		if c != '$' || i+1 == len(value) {
			b.WriteByte(c)
			i++
			continue
		}
		next, size := utf8.DecodeRuneInString(value[i+1:])
		switch next {
		case '$':
			b.WriteByte('$')
			i += 1 + size
		case '(':
			end := strings.IndexByte(value[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i += 2
				continue
			}
			name := value[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			b.WriteRune(next)
			i += 1 + size
		}
	}
	return b.String()
}
