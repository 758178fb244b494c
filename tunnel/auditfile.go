package tunnel

import (
	"fmt"
	"os"
	"sync"
)

// DefaultAuditFileMax is the size at which an audit file is set aside
// (AuditFile): 64 MiB.
const DefaultAuditFileMax = 64 << 20

// AuditFile is an audit trail kept in a file (PLUG_AUDIT_FILE), for
// AuditJSON: each line is appended whole, opening the file for that line,
// so that several processes (the agent, and plug agent members run beside
// it) may append to it, and a file moved away is made anew. Once the file
// holds Max bytes, the next line first renames it to Path+".1", replacing
// the one there: the trail takes at most about twice Max on disk, and the
// newest lines are always kept.
type AuditFile struct {
	Path string
	Max  int64
	mu   sync.Mutex
}

// OpenAuditFile checks that path can be appended to (making it, 0600),
// and returns its AuditFile with max (DefaultAuditFileMax when 0).
func OpenAuditFile(path string, max int64) (*AuditFile, error) {
	if max == 0 {
		max = DefaultAuditFileMax
	}
	f := &AuditFile{Path: path, Max: max}
	if _, err := f.Write(nil); err != nil {
		return nil, err
	}
	return f, nil
}

// Write appends line, after setting the file aside when it is full.
func (f *AuditFile) Write(line []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if info, err := os.Stat(f.Path); err == nil && info.Size() > 0 && info.Size()+int64(len(line)) > f.Max {
		if err := os.Rename(f.Path, f.Path+".1"); err != nil {
			return 0, fmt.Errorf("setting the audit file %s aside: %w", f.Path, err)
		}
	}
	out, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("opening the audit file: %w", err)
	}
	n, err := out.Write(line)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
