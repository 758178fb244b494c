package ntlm

import "testing"

// FuzzAcceptor feeds two tokens to an acceptor, as the two legs of a
// SESSION_SETUP: it must never panic, and never accept without the
// password.
func FuzzAcceptor(f *testing.F) {
	creds := NewCredentials("user", "password", "plug")
	f.Fuzz(func(t *testing.T, first, second []byte) {
		a := NewAcceptor(creds)
		_, done, err := a.Step(first)
		if err != nil {
			return
		}
		if done {
			t.Fatalf("authenticated by one token")
		}
		if _, done, err = a.Step(second); done && err == nil {
			t.Fatalf("authenticated without the password")
		}
	})
}
