package k8sapi

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The client end of a WebSocket (RFC 6455), just as much as reading a
// command's output through pods/exec needs: the upgrade, reading messages
// (fragments joined, pings answered) and closing. Everything the client
// writes is masked, as the RFC requires of clients.

const (
	wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xa
)

// wsConn is an upgraded connection.
type wsConn struct {
	rw       io.ReadWriteCloser
	r        *bufio.Reader
	protocol string      // the subprotocol the server chose
	stop     func() bool // stops closing the connection when the context ends

	writeMu sync.Mutex
}

// dialWebSocket upgrades request r to a WebSocket offering protocols, in
// order of preference. The connection closes when ctx ends. A refusal is an
// *APIError, as for any other request.
func (c *Client) dialWebSocket(ctx context.Context, r request, protocols []string) (*wsConn, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	req.Header.Del("Accept") // the API server answers an upgrade that accepts only JSON with 406
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)
	req.Header.Set("Sec-WebSocket-Protocol", strings.Join(protocols, ", "))
	resp, err := c.upgrade.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubernetes API %s %s: %w", r.method, r.path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil, fmt.Errorf("kubernetes API %s %s: the server answered %d, not an upgrade to a WebSocket", r.method, r.path, resp.StatusCode)
		}
		return nil, decodeFailure(r.method, r.path, resp)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, errors.New("the HTTP client cannot write to an upgraded connection")
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	chosen := resp.Header.Get("Sec-WebSocket-Protocol")
	switch {
	case resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]):
		rw.Close()
		return nil, fmt.Errorf("kubernetes API %s %s: the WebSocket upgrade was not answered for this request", r.method, r.path)
	case !slices.Contains(protocols, chosen):
		rw.Close()
		return nil, fmt.Errorf("kubernetes API %s %s: the server chose the WebSocket protocol %q, not one of %s", r.method, r.path, chosen, strings.Join(protocols, ", "))
	}
	stop := context.AfterFunc(ctx, func() { rw.Close() })
	return &wsConn{rw: rw, r: bufio.NewReader(rw), protocol: chosen, stop: stop}, nil
}

var (
	// errWSClosed is the end of the messages: the server closed the WebSocket.
	errWSClosed = errors.New("the WebSocket is closed")
	// errWSTooLarge is a message larger than the reader takes.
	errWSTooLarge = errors.New("websocket: a message larger than allowed")
)

// next returns the next data message, its fragments joined; a message
// longer than max bytes is an error. Pings are answered; a close frame
// is answered and ends the messages with errWSClosed.
func (w *wsConn) next(max int) ([]byte, error) {
	var msg []byte
	started := false
	for {
		fin, op, payload, err := w.frame(max)
		if err != nil {
			return nil, err
		}
		switch op {
		case wsPing:
			w.write(wsPong, payload)
			continue
		case wsPong:
			continue
		case wsClose:
			w.write(wsClose, nil)
			return nil, errWSClosed
		case wsText, wsBinary:
			if started {
				return nil, errors.New("websocket: a new message began before the last one ended")
			}
			started = true
		case wsContinuation:
			if !started {
				return nil, errors.New("websocket: a continuation frame with no message")
			}
		default:
			return nil, fmt.Errorf("websocket: unknown opcode %d", op)
		}
		if len(msg)+len(payload) > max {
			return nil, errWSTooLarge
		}
		msg = append(msg, payload...)
		if fin {
			return msg, nil
		}
	}
}

// frame reads one frame, unmasking its payload if the server masked it.
func (w *wsConn) frame(max int) (fin bool, op byte, payload []byte, err error) {
	var head [2]byte
	if _, err = io.ReadFull(w.r, head[:]); err != nil {
		return false, 0, nil, err
	}
	fin, op = head[0]&0x80 != 0, head[0]&0x0f
	masked := head[1]&0x80 != 0
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		var ext [2]byte
		if _, err = io.ReadFull(w.r, ext[:]); err != nil {
			return false, 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err = io.ReadFull(w.r, ext[:]); err != nil {
			return false, 0, nil, err
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	if n > uint64(max) {
		return false, 0, nil, errWSTooLarge
	}
	var mask [4]byte
	if masked {
		if _, err = io.ReadFull(w.r, mask[:]); err != nil {
			return false, 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(w.r, payload); err != nil {
		return false, 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return fin, op, payload, nil
}

// write sends one masked frame holding a whole message.
func (w *wsConn) write(op byte, payload []byte) error {
	frame := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		frame = append(frame, 0x80|byte(n))
	case n <= 0xffff:
		frame = append(frame, 0x80|126)
		frame = binary.BigEndian.AppendUint16(frame, uint16(n))
	default:
		frame = append(frame, 0x80|127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(n))
	}
	var mask [4]byte
	rand.Read(mask[:])
	frame = append(frame, mask[:]...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	_, err := w.rw.Write(frame)
	return err
}

// Close closes the connection.
func (w *wsConn) Close() error {
	w.stop()
	return w.rw.Close()
}
