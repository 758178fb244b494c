package k8sapi

import "strings"

// PointerEscape escapes one reference token of a JSON pointer (RFC 6901),
// e.g. an annotation key: "~" becomes "~0" and "/" becomes "~1".
func PointerEscape(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}
