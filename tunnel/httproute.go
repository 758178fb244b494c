package tunnel

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// The callers of a personally taken-over name (agent_filtered.go) meet the
// standard library's HTTP server, in the agent: each connection is sniffed
// first. One that starts like an HTTP/1.x request line, or the HTTP/2
// connection preface (h2c with prior knowledge), is served by the server,
// which routes each request on its own: HTTP/1.1 request by request over
// keep-alive, HTTP/2 stream by stream; an HTTP/1.1 request asking to
// upgrade to h2c is answered 101 and its connection continues as HTTP/2. A
// request a member's filter matches is proxied to that member's run (over
// forwarded-tcpip channels, kept open between requests); every other one
// to a ready deployed pod picked for it (DeployedLister), so that every
// ready pod takes requests, over connections kept open to each pod. A connection that
// is not HTTP — TLS among them — or sends nothing within sniffWait goes to
// a deployed pod as it is.

const (
	// sniffWait is how long a caller has to send its first bytes before its
	// connection is taken for one whose server speaks first, and goes to a
	// deployed pod as it is.
	sniffWait = time.Second
	// maxMethod bounds the request method a sniffed connection may start
	// with.
	maxMethod = 20
	// maxCallerHeaderBytes bounds a request's header (HTTP/1.1: the request
	// line and fields; HTTP/2: the decoded field list): a bigger one is
	// answered 431.
	maxCallerHeaderBytes = 64 << 10
	// maxCallerStreams bounds the concurrent streams of one HTTP/2 caller.
	maxCallerStreams = 250
	// callerHeaderTimeout bounds the time a caller takes to send a
	// request's header; callerIdle how long an idle connection is kept.
	callerHeaderTimeout = 30 * time.Second
	callerIdle          = 5 * time.Minute
	// runIdleConns bounds the idle connections kept to a run, per protocol;
	// podIdleConns those to each deployed pod.
	runIdleConns = 16
	podIdleConns = 16
	// podTries bounds the pods one request is tried on when connecting
	// fails, and podDialTimeout each try.
	podTries       = 3
	podDialTimeout = time.Second
	// h2cUpgradeMaxHeader bounds the header block of a request upgraded to
	// h2c (one HTTP/2 frame of the default size); a bigger one is answered
	// in HTTP/1.1 instead.
	h2cUpgradeMaxHeader = 16 << 10
	h2Preface           = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// errRunUnreachable marks a failure to reach a member's run: the request is
// sent to the deployed pods instead, when it has no body.
var errRunUnreachable = errors.New("the run cannot be reached")

// httpRoutes serves a front's HTTP callers.
type httpRoutes struct {
	f        *front
	server   *http.Server
	conns    *connListener
	deployed [2]*httputil.ReverseProxy // HTTP/1.1, HTTP/2
	pods     [2]*http.Transport        // theirs, with connections to each pod
	dialAs   Binding                   // the name and port DialDeployed is asked for
}

func newHTTPRoutes(f *front) *httpRoutes {
	h := &httpRoutes{f: f, conns: newConnListener(f.listener.Addr()), dialAs: Binding{Name: f.name, Port: f.port}}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	h.server = &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: callerHeaderTimeout,
		IdleTimeout:       callerIdle,
		MaxHeaderBytes:    maxCallerHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxCallerStreams},
		ErrorLog:          log.New(io.Discard, "", 0), // callers' mistakes are theirs: answered, not logged
	}
	lister := f.a.Platform.(DeployedLister)
	for i, proto := range []string{"http/1.1", "h2c"} {
		t := newTransport(proto, dialPod)
		t.MaxIdleConnsPerHost = podIdleConns
		h.pods[i] = t
		h.deployed[i] = newProxy(&toDeployed{list: func() ([]string, error) { return lister.DeployedAddrs(h.dialAs) }, t: t}, f.name)
	}
	go h.server.Serve(h.conns)
	return h
}

// serve routes one caller connection.
func (h *httpRoutes) serve(c net.Conn) {
	c, isHTTP := sniff(c)
	if isHTTP && h.conns.offer(c) {
		return
	}
	h.pipeDeployed(c)
}

// pipeDeployed carries c, as it is, to a deployed pod; or resets it.
func (h *httpRoutes) pipeDeployed(c net.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.f.a.ctx), dialTimeout)
	up, err := h.f.a.Platform.(DeployedDialer).DialDeployed(ctx, h.dialAs)
	cancel()
	if err != nil {
		resetClose(c)
		return
	}
	pipe(c, up)
}

// close stops taking callers: idle connections close at once, HTTP/2 ones
// are told to go away, and what is left is cut after a while.
func (h *httpRoutes) close() {
	h.conns.Close()
	for _, t := range h.pods {
		t.CloseIdleConnections()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h.server.Shutdown(ctx)
		h.server.Close()
	}()
}

// ServeHTTP routes one request: to the run whose filter matches it, or to
// the deployed pods.
func (h *httpRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isH2CUpgrade(r) {
		if h.upgrade(w, r) {
			return
		}
		// Answered in HTTP/1.1: the upgrade is not passed on, or the
		// proxy would hand the whole connection to one backend.
		r.Header.Del("Upgrade")
		r.Header.Del("Http2-Settings")
	}
	v := 0
	if r.ProtoMajor == 2 {
		v = 1
	}
	if b := h.f.route(r); b != nil {
		b.run.proxy(b, h, v).ServeHTTP(w, r)
		return
	}
	h.deployed[v].ServeHTTP(w, r)
}

// runTransports are the proxies of a member's matching requests to its
// run, made on first use: one per protocol, keeping their connections (SSH
// channels) open between requests.
type runTransports struct {
	mu      sync.Mutex
	proxies [2]*httputil.ReverseProxy
	ts      [2]*http.Transport
}

// proxy returns b's proxy for protocol v (0 HTTP/1.1, 1 HTTP/2).
func (rt *runTransports) proxy(b *binding, h *httpRoutes, v int) *httputil.ReverseProxy {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.proxies[v] == nil {
		t := newTransport([]string{"http/1.1", "h2c"}[v], b.dialRun)
		t.MaxIdleConnsPerHost = runIdleConns
		rt.ts[v] = t
		rt.proxies[v] = newProxy(&orDeployed{b: b, run: t, deployed: h.deployed[v].Transport}, b.Name)
	}
	return rt.proxies[v]
}

// close closes the idle connections to the run.
func (rt *runTransports) close() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, t := range rt.ts {
		if t != nil {
			t.CloseIdleConnections()
		}
	}
}

// orDeployed sends a request to the run, or to the deployed pods while the
// run cannot take it (it is away, its process does not answer, the name is
// being given back): at once when there is no run connection, and after a
// failed attempt when the request has no body to have been sent.
type orDeployed struct {
	b             *binding
	run, deployed http.RoundTripper
}

func (o *orDeployed) RoundTrip(req *http.Request) (*http.Response, error) {
	if o.b.conn.Load() == nil {
		return o.deployed.RoundTrip(req)
	}
	resp, err := o.run.RoundTrip(req)
	if err != nil && errors.Is(err, errRunUnreachable) && (req.Body == nil || req.Body == http.NoBody) {
		return o.deployed.RoundTrip(req)
	}
	return resp, err
}

// errPodUnreachable marks a failure to connect to a deployed pod: nothing
// of the request was sent.
var errPodUnreachable = errors.New("the deployed pod cannot be reached")

// toDeployed sends each request to a ready deployed pod picked for it from
// what list says now, so that the requests spread over every ready pod and
// follow them as they scale; t keeps connections to each pod open between
// requests. A request without a body whose pod cannot be connected to is
// tried on another one, up to podTries.
type toDeployed struct {
	list func() ([]string, error)
	t    *http.Transport
}

func (d *toDeployed) RoundTrip(req *http.Request) (*http.Response, error) {
	addrs, err := d.list()
	if err != nil {
		return nil, err
	}
	addrs = slices.Clone(addrs)
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	var errs []error
	for _, addr := range addrs[:min(podTries, len(addrs))] {
		out, u := *req, *req.URL
		u.Host = addr
		out.URL = &u
		resp, err := d.t.RoundTrip(&out)
		if err == nil || !errors.Is(err, errPodUnreachable) || (req.Body != nil && req.Body != http.NoBody) {
			return resp, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// dialPod connects to a deployed pod's address.
func dialPod(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, podDialTimeout)
	defer cancel()
	var d net.Dialer // the agent's own dial of the service it parked, not a run's
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errPodUnreachable, err)
	}
	return c, nil
}

// dialRun opens a forwarded-tcpip channel to b's run, counted as one of its
// key's channels while it is open.
func (b *binding) dialRun(ctx context.Context, _ string) (net.Conn, error) {
	dc := b.conn.Load()
	if dc == nil {
		return nil, errRunUnreachable
	}
	if err := dc.a.usage.take(dc.fingerprint, useChannel); err != nil {
		return nil, fmt.Errorf("%w: %v", errRunUnreachable, err)
	}
	ch, reqs, err := openChannel(dc.conn, "forwarded-tcpip", ssh.Marshal(forwardedChannel{Addr: b.Name, Port: uint32(b.Port), Origin: "0.0.0.0"}))
	if err != nil {
		dc.a.usage.give(dc.fingerprint, useChannel)
		return nil, fmt.Errorf("%w: %v", errRunUnreachable, err)
	}
	go ssh.DiscardRequests(reqs)
	dc.a.routed(b, routeRun, "")
	give := sync.OnceFunc(func() { dc.a.usage.give(dc.fingerprint, useChannel) })
	return &runConn{channelConn: channelConn{Channel: ch, remote: tunnelAddr(b.Name)}, give: give}, nil
}

// runConn is a channel to a run, giving its key's channel back once closed.
type runConn struct {
	channelConn
	give func()
}

func (c *runConn) Close() error {
	defer c.give()
	return c.channelConn.Close()
}

// newTransport is an HTTP client transport speaking proto ("http/1.1", or
// "h2c": HTTP/2 with prior knowledge) over the connections dial makes to
// the address of a request's URL.
func newTransport(proto string, dial func(ctx context.Context, addr string) (net.Conn, error)) *http.Transport {
	var protocols http.Protocols
	if proto == "h2c" {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	return &http.Transport{
		DialContext:     func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		Protocols:       &protocols,
		IdleConnTimeout: 90 * time.Second,
		HTTP2:           &http.HTTP2Config{MaxConcurrentStreams: maxCallerStreams},
	}
}

// forwardedHeaders are those ReverseProxy drops from what the caller sent
// when it is given Rewrite; plug passes them on unchanged.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// newProxy proxies to what t reaches, changing nothing of the request but
// its hop-by-hop fields, and streaming the response as it comes (gRPC).
func newProxy(t http.RoundTripper, name string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", name
			for _, k := range forwardedHeaders {
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
		},
		Transport:     t,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "plug: "+name+": the request could not be carried: "+err.Error(), http.StatusBadGateway)
		},
	}
}

// sniff reads a caller's first bytes, up to sniffWait, and says whether
// they start an HTTP/1.x request line or the HTTP/2 preface (a method of
// capital letters, then a space: the preface starts "PRI "). The bytes
// read are put back.
func sniff(c net.Conn) (net.Conn, bool) {
	c.SetReadDeadline(time.Now().Add(sniffWait))
	buf := make([]byte, 0, maxMethod+1)
	decided, isHTTP := false, false
	for !decided {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		decided, isHTTP = classify(buf)
		if err != nil && !decided {
			decided = true
		}
	}
	c.SetReadDeadline(time.Time{})
	if len(buf) == 0 {
		return c, false
	}
	return &prefixedConn{Conn: c, prefix: buf}, isHTTP
}

// classify says whether b, the first bytes of a connection, decide that it
// is HTTP (a method token of capital letters and a space) or not.
func classify(b []byte) (decided, isHTTP bool) {
	for i, c := range b {
		switch {
		case c == ' ' && i > 0:
			return true, true
		case c < 'A' || c > 'Z':
			return true, false
		}
	}
	return len(b) > maxMethod, false
}

// resetClose closes c with a TCP reset, so that its caller learns at once.
func resetClose(c net.Conn) {
	if p, ok := c.(*prefixedConn); ok {
		c = p.Conn
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	c.Close()
}

// connListener is a net.Listener of the connections offered to it.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// offer hands c to Accept; false once the listener is closed.
func (l *connListener) offer(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// isH2CUpgrade reports whether r asks to continue its connection as
// HTTP/2 (RFC 7540 section 3.2).
func isH2CUpgrade(r *http.Request) bool {
	return r.ProtoMajor == 1 && hasToken(r.Header, "Upgrade", "h2c") && hasToken(r.Header, "Connection", "upgrade") &&
		len(r.Header["Http2-Settings"]) == 1
}

func hasToken(h http.Header, name, token string) bool {
	for _, v := range h[name] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// upgrade answers an h2c upgrade: 101, then the connection is served again
// as HTTP/2, with r as its stream 1 (the standard library's server has no
// h2c upgrade of its own). After the client's preface and first SETTINGS
// frame, a HEADERS frame of r is put into what the server reads, as the
// client would have sent it had it known. False, having done nothing, when
// r has a body or too big a header: it is then answered in HTTP/1.1, which
// the upgrade allows.
func (h *httpRoutes) upgrade(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength != 0 {
		return false
	}
	block := hpackRequest(r)
	if len(block) > h2cUpgradeMaxHeader {
		return false
	}
	rc := http.NewResponseController(w)
	conn, rw, err := rc.Hijack()
	if err != nil {
		return false
	}
	fail := func() { conn.Close() }
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"); err != nil || rw.Flush() != nil {
		fail()
		return true
	}
	conn.SetReadDeadline(time.Now().Add(callerHeaderTimeout))
	head, err := readPrefaceAndSettings(rw.Reader)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		fail()
		return true
	}
	var frame []byte
	frame = append(frame, byte(len(block)>>16), byte(len(block)>>8), byte(len(block)))
	frame = append(frame, 0x1, 0x1|0x4) // HEADERS, END_STREAM|END_HEADERS
	frame = binary.BigEndian.AppendUint32(frame, 1)
	frame = append(frame, block...)
	prefix := append(head, frame...)
	if n := rw.Reader.Buffered(); n > 0 {
		rest, _ := rw.Reader.Peek(n)
		prefix = append(prefix, rest...)
	}
	if !h.conns.offer(&prefixedConn{Conn: conn, prefix: prefix}) {
		fail()
	}
	return true
}

// readPrefaceAndSettings reads the HTTP/2 client preface and the frame
// after it, which must be SETTINGS, and returns their bytes.
func readPrefaceAndSettings(r *bufio.Reader) ([]byte, error) {
	buf := make([]byte, len(h2Preface)+9)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	if string(buf[:len(h2Preface)]) != h2Preface || buf[len(h2Preface)+3] != 0x4 {
		return nil, errors.New("not an HTTP/2 preface and SETTINGS")
	}
	size := int(buf[len(h2Preface)])<<16 | int(buf[len(h2Preface)+1])<<8 | int(buf[len(h2Preface)+2])
	if size > 16<<10 {
		return nil, errors.New("SETTINGS frame too big")
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, err
	}
	return append(buf, payload...), nil
}

// hopByHop are the fields of an HTTP/1.1 request that HTTP/2 does not
// carry.
var hopByHop = map[string]bool{"Connection": true, "Upgrade": true, "Http2-Settings": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Transfer-Encoding": true, "Host": true}

// hpackRequest encodes r's header as an HTTP/2 header block, each field a
// literal without indexing (RFC 7541 section 6.2.2), no Huffman coding.
func hpackRequest(r *http.Request) []byte {
	var b []byte
	field := func(name, value string) {
		b = append(b, 0)
		b = hpackString(b, name)
		b = hpackString(b, value)
	}
	field(":method", r.Method)
	field(":scheme", "http")
	field(":authority", r.Host)
	field(":path", r.RequestURI)
	for name, values := range r.Header {
		if hopByHop[name] || name == "Te" {
			continue
		}
		for _, v := range values {
			field(strings.ToLower(name), v)
		}
	}
	if hasToken(r.Header, "Te", "trailers") {
		field("te", "trailers")
	}
	return b
}

// hpackString appends s as an HPACK string literal: its length as a 7-bit
// prefix integer, then its bytes.
func hpackString(b []byte, s string) []byte {
	n := len(s)
	if n < 127 {
		b = append(b, byte(n))
	} else {
		b = append(b, 127)
		for n -= 127; n >= 128; n >>= 7 {
			b = append(b, byte(n%128+128))
		}
		b = append(b, byte(n))
	}
	return append(b, s...)
}
