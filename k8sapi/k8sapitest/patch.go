package k8sapitest

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// mergePatch applies the JSON merge patch (RFC 7386) patch to target.
func mergePatch(target, patch any) any {
	p, ok := patch.(object)
	if !ok {
		return patch
	}
	t, ok := target.(object)
	if !ok {
		t = object{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

// jsonPatch applies the JSON patch (RFC 6902) ops to doc: its add,
// remove, replace and test operations.
func jsonPatch(doc any, ops []object) (any, error) {
	for i, op := range ops {
		name, _ := op["op"].(string)
		path, ok := op["path"].(string)
		if !ok || (path != "" && !strings.HasPrefix(path, "/")) {
			return nil, fmt.Errorf("operation %d: the path %v is not a JSON pointer", i, op["path"])
		}
		value, hasValue := op["value"]
		switch name {
		case "add", "replace", "test":
			if !hasValue {
				return nil, fmt.Errorf("operation %d (%s %s) has no value", i, name, path)
			}
		case "remove":
		default:
			return nil, fmt.Errorf("operation %d: %q is not an operation k8sapitest applies", i, name)
		}
		var tokens []string
		if path != "" {
			for _, t := range strings.Split(path[1:], "/") {
				tokens = append(tokens, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
			}
		}
		var err error
		if doc, err = patchAt(doc, tokens, name, clone(value)); err != nil {
			return nil, fmt.Errorf("operation %d (%s %s): %w", i, name, path, err)
		}
	}
	return doc, nil
}

var errTestFailed = errors.New("the value is not the one tested for")

// patchAt applies operation op with value at the pointer tokens below
// node, and returns node as changed.
func patchAt(node any, tokens []string, op string, value any) (any, error) {
	if len(tokens) == 0 {
		switch op {
		case "test":
			if !reflect.DeepEqual(node, value) {
				return nil, errTestFailed
			}
			return node, nil
		case "remove":
			return nil, errors.New("cannot remove the whole document")
		}
		return value, nil
	}
	tok, rest := tokens[0], tokens[1:]
	switch n := node.(type) {
	case object:
		child, has := n[tok]
		if len(rest) > 0 || op == "test" {
			if !has {
				return nil, fmt.Errorf("no member %q", tok)
			}
			changed, err := patchAt(child, rest, op, value)
			if err == nil {
				n[tok] = changed
			}
			return n, err
		}
		switch {
		case op == "add":
			n[tok] = value
		case !has:
			return nil, fmt.Errorf("no member %q to %s", tok, op)
		case op == "replace":
			n[tok] = value
		default:
			delete(n, tok)
		}
		return n, nil
	case []any:
		if tok == "-" && op == "add" && len(rest) == 0 {
			return append(n, value), nil
		}
		i, err := strconv.Atoi(tok)
		limit := len(n)
		if op == "add" && len(rest) == 0 {
			limit++ // add may insert at the end
		}
		if err != nil || i < 0 || i >= limit || (tok != "0" && strings.HasPrefix(tok, "0")) {
			return nil, fmt.Errorf("%q is not an index of an array of %d", tok, len(n))
		}
		if len(rest) > 0 || op == "test" {
			changed, err := patchAt(n[i], rest, op, value)
			if err == nil {
				n[i] = changed
			}
			return n, err
		}
		switch op {
		case "add":
			return append(n[:i:i], append([]any{value}, n[i:]...)...), nil
		case "replace":
			n[i] = value
			return n, nil
		}
		return append(n[:i:i], n[i+1:]...), nil
	}
	return nil, fmt.Errorf("%q is below a value that is neither an object nor an array", tok)
}
