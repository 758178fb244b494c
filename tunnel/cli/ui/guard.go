package ui

import (
	"crypto/subtle"
	"net"
	"net/http"
	"slices"
	"strconv"
)

// csp is the page's Content Security Policy: its own scripts, styles and
// requests only; no inline script or style, no frame, no form elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// allowedHosts are the Host headers of requests to a listener on addr:
// its address, and localhost for a listener on 127.0.0.1 or ::1.
func allowedHosts(addr *net.TCPAddr) []string {
	port := strconv.Itoa(addr.Port)
	return []string{net.JoinHostPort(addr.IP.String(), port), net.JoinHostPort("localhost", port)}
}

// guard refuses, before any route, a request whose Host is not the
// listener's (a page of another site that had its name resolve to
// loopback) or that comes from another site (Origin, Sec-Fetch-Site), and
// sets the security headers of every answer.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !slices.Contains(s.hosts, r.Host) {
			http.Error(w, "plug ui: this page answers at "+s.hosts[0]+" only", http.StatusMisdirectedRequest)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			http.Error(w, "plug ui: requests from other sites are refused", http.StatusForbidden)
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			http.Error(w, "plug ui: requests from other sites are refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokened lets through the requests that carry this start's token: a
// POST in the X-Plug-Token header, with an Origin (every browser sends
// one with a POST) and a JSON body; a GET in the header or the token
// query parameter (an EventSource sets no header).
func (s *Server) tokened(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := r.Header.Get("X-Plug-Token")
		if r.Method == http.MethodGet && token == "" {
			token = r.URL.Query().Get("token")
		}
		if subtle.ConstantTimeCompare([]byte(token), []byte(s.token)) != 1 {
			http.Error(w, "plug ui: no token, or not this page's: open the address plug ui printed", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			if r.Header.Get("Origin") == "" {
				http.Error(w, "plug ui: a change needs the page's Origin", http.StatusForbidden)
				return
			}
			if r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "plug ui: a change is a JSON body", http.StatusUnsupportedMediaType)
				return
			}
		}
		next(w, r)
	}
}
