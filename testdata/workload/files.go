package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// catFiles writes each file to stdout. Started as "cat" (the workload
// image's /bin/cat), it is the command plug's agent runs to read the uid
// of the workload's process (cat /proc/1/status).
func catFiles(args []string) error {
	for _, name := range args {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		_, err = io.Copy(os.Stdout, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// statFile prints "UID GID SIZE" of a file.
func statFile(args []string) error {
	if len(args) != 1 {
		return errors.New("give one file")
	}
	st, err := os.Stat(args[0])
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	_, err = fmt.Printf("%d %d %d\n", sys.Uid, sys.Gid, st.Size())
	return err
}

// writeFile writes TEXT to FILE, created with mode 0644.
func writeFile(args []string) error {
	if len(args) != 2 {
		return errors.New("give a file and its text")
	}
	return os.WriteFile(args[0], []byte(args[1]), 0o644)
}
