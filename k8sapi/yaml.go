package k8sapi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// parseYAML reads the subset of YAML that kubeconfig files are written in:
// block mappings and sequences, plain and quoted scalars, empty flow
// collections ({} and []), and comments. JSON, being YAML too, is read
// with encoding/json. Scalars are returned as strings; mappings as
// map[string]any; sequences as []any.
func parseYAML(src []byte) (any, error) {
	if t := strings.TrimSpace(string(src)); strings.HasPrefix(t, "{") {
		var v any
		return v, json.Unmarshal(src, &v)
	}
	p := &yamlParser{}
	for i, raw := range strings.Split(string(src), "\n") {
		text := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimLeft(text, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || trimmed == "---" {
			continue
		}
		if strings.HasPrefix(trimmed, "\t") {
			return nil, fmt.Errorf("line %d: YAML is indented with spaces, not tabs", i+1)
		}
		p.lines = append(p.lines, yamlLine{num: i + 1, indent: len(text) - len(trimmed), text: trimmed})
	}
	if len(p.lines) == 0 {
		return map[string]any{}, nil
	}
	v, err := p.block(p.lines[0].indent)
	if err == nil && p.pos < len(p.lines) {
		err = fmt.Errorf("line %d: unexpected indentation", p.lines[p.pos].num)
	}
	return v, err
}

type yamlLine struct {
	num, indent int
	text        string
}

type yamlParser struct {
	lines []yamlLine
	pos   int
}

// block reads the mapping or sequence whose entries start at indent.
func (p *yamlParser) block(indent int) (any, error) {
	if isSeqItem(p.lines[p.pos].text) {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

func (p *yamlParser) sequence(indent int) (any, error) {
	var items []any
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent != indent || !isSeqItem(l.text) {
			break
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		switch {
		case rest == "":
			p.pos++
			if p.pos >= len(p.lines) || p.lines[p.pos].indent <= indent {
				items = append(items, nil)
				continue
			}
			v, err := p.block(p.lines[p.pos].indent)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		case isMapEntry(rest):
			// "- key: value": a mapping whose first entry sits after the dash.
			inner := indent + len(l.text) - len(rest)
			p.lines[p.pos] = yamlLine{num: l.num, indent: inner, text: rest}
			v, err := p.mapping(inner)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		default:
			v, err := scalar(rest, l.num)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
			p.pos++
		}
	}
	return items, nil
}

// isMapEntry reports whether text starts with "key:" followed by a space
// or the end of the line.
func isMapEntry(text string) bool {
	_, _, ok := splitEntry(text)
	return ok
}

func splitEntry(text string) (key, value string, ok bool) {
	if strings.HasPrefix(text, `"`) || strings.HasPrefix(text, "'") {
		end := strings.Index(text[1:], text[:1])
		if end < 0 {
			return "", "", false
		}
		k, err := scalar(text[:end+2], 0)
		after := text[end+2:]
		if err != nil || !strings.HasPrefix(after, ":") {
			return "", "", false
		}
		return k.(string), strings.TrimSpace(after[1:]), true
	}
	for i := 0; i < len(text); i++ {
		if text[i] == ':' && (i+1 == len(text) || text[i+1] == ' ') {
			return text[:i], strings.TrimSpace(text[i+1:]), true
		}
	}
	return "", "", false
}

func (p *yamlParser) mapping(indent int) (any, error) {
	m := map[string]any{}
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			return nil, fmt.Errorf("line %d: unexpected indentation", l.num)
		}
		if isSeqItem(l.text) {
			break
		}
		key, value, ok := splitEntry(l.text)
		if !ok {
			return nil, fmt.Errorf("line %d: expected \"key: value\", found %q", l.num, l.text)
		}
		p.pos++
		if value != "" && !strings.HasPrefix(value, "#") {
			v, err := scalar(value, l.num)
			if err != nil {
				return nil, err
			}
			m[key] = v
			continue
		}
		// The value is the block below: more indented, or a sequence at
		// the same indentation as the key.
		if p.pos < len(p.lines) {
			next := p.lines[p.pos]
			if next.indent > indent || (next.indent == indent && isSeqItem(next.text)) {
				v, err := p.block(next.indent)
				if err != nil {
					return nil, err
				}
				m[key] = v
				continue
			}
		}
		m[key] = nil
	}
	return m, nil
}

// scalar reads a plain or quoted scalar, or an empty flow collection.
func scalar(s string, line int) (any, error) {
	switch {
	case s == "{}":
		return map[string]any{}, nil
	case s == "[]":
		return []any{}, nil
	case strings.HasPrefix(s, `"`):
		end := closingQuote(s)
		if end < 0 {
			return nil, fmt.Errorf("line %d: unterminated string %s", line, s)
		}
		v, err := strconv.Unquote(s[:end+1])
		if err != nil {
			return nil, fmt.Errorf("line %d: bad string %s: %v", line, s, err)
		}
		return v, nil
	case strings.HasPrefix(s, "'"):
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '\'' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			return b.String(), nil
		}
		return nil, fmt.Errorf("line %d: unterminated string %s", line, s)
	case strings.HasPrefix(s, "|") || strings.HasPrefix(s, ">") || strings.HasPrefix(s, "&") ||
		strings.HasPrefix(s, "*") || strings.HasPrefix(s, "{") || strings.HasPrefix(s, "["):
		return nil, fmt.Errorf("line %d: this YAML feature is not supported in a kubeconfig here (%q); write the value on one line, or convert the file with `kubectl config view --raw -o json`", line, s)
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s, nil
}

// closingQuote is the index of the quote ending the double-quoted s.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
