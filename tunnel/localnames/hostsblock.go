package localnames

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Where a run cannot have a hosts file of its own (macOS, Windows), it
// writes its names into the machine's hosts file, in a block of its own
// that starts and ends with a marker line naming the run's process. The
// run removes its block when it ends; the next run removes the blocks of
// runs whose process is gone (after a crash) before adding its own, and
// says so. Lines outside the blocks are never changed.

const (
	blockBeginPrefix = "# >>> plug run, process "
	blockBeginSuffix = ": cluster names, removed when the run ends"
	blockEndPrefix   = "# <<< plug run, process "
)

// withBlock returns content with the block of process pid holding lines,
// in place of its block if it has one, else first in the file, so that
// the cluster's names win over the machine's. No lines removes the block.
func withBlock(content []byte, pid int, lines []HostLine) []byte {
	eol := lineEnding(content)
	rest, _ := withoutBlocks(content, func(p int) bool { return p != pid })
	if len(lines) == 0 {
		return rest
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%d%s%s", blockBeginPrefix, pid, blockBeginSuffix, eol)
	for _, l := range lines {
		fmt.Fprintf(&b, "%s\t%s%s", l.Addr, strings.Join(l.Names, " "), eol)
	}
	fmt.Fprintf(&b, "%s%d%s", blockEndPrefix, pid, eol)
	b.Write(rest)
	return b.Bytes()
}

// withoutBlocks returns content without the blocks of the processes keep
// does not keep, and those processes. A block whose end marker is missing
// ends at the end of the file.
func withoutBlocks(content []byte, keep func(pid int) bool) ([]byte, []int) {
	var out bytes.Buffer
	var removed []int
	dropping := -1
	for _, line := range bytes.SplitAfter(content, []byte("\n")) {
		text := strings.TrimRight(string(line), "\r\n")
		if pid, ok := markerPID(text, blockBeginPrefix, blockBeginSuffix); ok && dropping < 0 && !keep(pid) {
			dropping = pid
			removed = append(removed, pid)
			continue
		}
		if dropping >= 0 {
			if pid, ok := markerPID(text, blockEndPrefix, ""); ok && pid == dropping {
				dropping = -1
			}
			continue
		}
		out.Write(line)
	}
	return out.Bytes(), removed
}

// markerPID reads the process id of a marker line.
func markerPID(line, prefix, suffix string) (int, bool) {
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, suffix)
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(rest)
	return pid, err == nil && pid > 0
}

// lineEnding is the file's own: CRLF on a Windows hosts file.
func lineEnding(content []byte) string {
	if bytes.Contains(content, []byte("\r\n")) {
		return "\r\n"
	}
	return "\n"
}
