package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// Striping carries one application connection over several channels of
// one SSH connection. x/crypto/ssh gives every channel a fixed receive
// window of 2 MiB, so one channel carries at most 2 MiB per round trip
// (about 780 Mbit/s at 20 ms, 160 Mbit/s at 100 ms) however fast the TCP
// connection under it is; n channels carry n windows.
//
// Both ends must be plug, and say so at hello: the CLI's helloMsg.Stripes
// and the agent's welcomeMsg.Stripes are the most channels each takes for
// one connection, and the smaller is the connection's limit (0, or an
// older end, or an OpenSSH client: no striping, the plain channels of
// RFC 4254). Then the CLI opens a connection in the cluster with a
// stripeDirectType channel instead of direct-tcpip, the agent hands a
// caller of a served name over with a stripeForwardedType channel instead
// of forwarded-tcpip; their extra data is a stripeOpen: the striped
// connection's id, chosen by the end that opens it (odd by the CLI, even by
// the agent, unique among that SSH connection's striped connections), then
// the extra data of the plain channel. Either end adds channels to a
// striped connection, each a stripeJoinType channel naming the id, when
// what it sends waits for the channels it has. It measures over each
// stretch of stripeRatePeriod or the SSH connection's shortest round trip
// (its keepalives'), whichever is longer, of reads that filled their buffer
// (more is queued): the channels hold it back if, in that stretch, one such
// read took longer than stripeGrowWait to be written while every other
// channel was writing too, and what the connection sent is at least a
// quarter of what its channels' windows let through in that round trip:
// the window is what holds it back, not the far end's or the machine's
// speed, which more channels would not help. Then it doubles its channels
// (up to the limit), and measures anew once they are open. A connection
// starts with one channel, so interactive traffic costs what it did; on a
// long round trip a bulk transfer reaches 8 channels within a few round
// trips (measured at 21.5 ms: within about 0.25–0.5 s, where one channel
// at a time took 0.6–3 s); on loopback a window lets gigabytes a second
// through in a round trip, so a connection stays on one channel. The
// channels stay until the connection ends.
//
// Every channel of a striped connection carries segments, both ways: an
// 8-byte big-endian offset in that direction's stream, a 4-byte big-endian
// length (at most maxSegment), then that many bytes. A segment of length 0
// at the stream's final offset ends the direction: the receiver half-closes
// the application connection, as pipe does at the end of a plain channel.
// Segments of one channel are in offset order; the receiver writes each
// out when all before it are written, and reads a channel no further than
// one buffer (bulkBuffer) meanwhile, so that it buffers little beyond the
// channels' windows.
//
// When both directions have ended, the application connection and every
// channel are closed. A failure — the application connection failing, a
// channel ending or failing before the stream it was part of is complete,
// a segment that overlaps another or comes after the end — closes them all
// at once, and the peer's end sees its channels close and closes its
// application connection too.
const (
	stripeDirectType    = "stripe-direct@plug"
	stripeForwardedType = "stripe-forwarded@plug"
	stripeJoinType      = "stripe@plug"

	// maxStripes is the most channels this end takes for one connection.
	// Every channel of a striped connection counts as one of the agent's
	// channels (Limits.ChannelsPerKey, Limits.Channels).
	maxStripes = 8
	// maxSegment bounds a segment's length.
	maxSegment = 1 << 20
	// segmentHeader is the length of a segment's offset and length.
	segmentHeader = 12
	// stripeGrowWait is how long a full read may wait to be written before
	// the sender adds a channel.
	stripeGrowWait = time.Millisecond
	// stripeWindow is the receive window x/crypto/ssh gives every channel.
	stripeWindow = 2 << 20
	// stripeRatePeriod is the shortest time over which a stripe's rate is
	// measured.
	stripeRatePeriod = 20 * time.Millisecond
)

// stripeOpen is the extra data of a stripeDirectType, stripeForwardedType
// or stripeJoinType channel: the striped connection's id, then (not for a
// join) the extra data of the direct-tcpip or forwarded-tcpip channel it
// stands for.
type stripeOpen struct {
	ID   uint32
	Rest []byte `ssh:"rest"`
}

// stripeTable is the striped connections of one SSH connection, at one end.
type stripeTable struct {
	// open opens a stripeJoinType channel to the peer with extra data
	// payload.
	open func(payload []byte) (io.ReadWriteCloser, error)
	// take counts one more channel against the agent's caps, give one
	// less; nil at the CLI.
	take func() error
	give func()
	// firstID is this end's first id: 1 at the CLI, 2 at the agent.
	firstID uint32

	minRTT atomic.Int64 // the SSH connection's shortest round trip, in ns; 0: none yet

	mu     sync.Mutex
	limit  int // channels per striped connection, agreed at hello; 0: none
	lastID uint32
	byID   map[uint32]*stripe
}

// stripeTableOf is the table of conn's striped connections at the CLI
// (agent false) or the agent.
func stripeTableOf(conn ssh.Conn, agent bool) *stripeTable {
	t := &stripeTable{firstID: 1, byID: map[uint32]*stripe{}}
	if agent {
		t.firstID = 2
	}
	t.lastID = t.firstID - 2 // the first is firstID
	t.open = func(payload []byte) (io.ReadWriteCloser, error) {
		ch, reqs, err := openChannel(conn, stripeJoinType, payload)
		if err != nil {
			return nil, err
		}
		go ssh.DiscardRequests(reqs)
		return ch, nil
	}
	return t
}

// agree sets the limit: the smaller of this end's maxStripes and the
// peer's, which 0 (the peer does not stripe) turns off. It returns the
// limit.
func (t *stripeTable) agree(peer int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limit = min(max(peer, 0), maxStripes)
	if t.limit < 2 {
		t.limit = 0
	}
	return t.limit
}

// sawRTT takes a round trip of the SSH connection.
func (t *stripeTable) sawRTT(d time.Duration) {
	for {
		old := t.minRTT.Load()
		if old != 0 && old <= int64(d) || t.minRTT.CompareAndSwap(old, max(int64(d), 1)) {
			return
		}
	}
}

// striping reports whether connections are striped.
func (t *stripeTable) striping() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.limit > 0
}

// newStripe registers a striped connection of this end's for local, with a
// fresh id. It is dropped (drop) if its first channel does not open, or
// carried (carry).
func (t *stripeTable) newStripe(local io.ReadWriteCloser) *stripe {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.lastID += 2; t.byID[t.lastID] != nil; t.lastID += 2 {
	}
	return t.register(t.lastID, local)
}

// accept registers the peer's striped connection id for local; an error if
// this end does not stripe, or id is in use.
func (t *stripeTable) accept(id uint32, local io.ReadWriteCloser) (*stripe, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.limit == 0:
		return nil, errors.New("this connection said at hello that it does not stripe")
	case id%2 == t.firstID%2 || t.byID[id] != nil:
		return nil, fmt.Errorf("striped connection %d is not the peer's to open", id)
	}
	return t.register(id, local), nil
}

// register adds a striped connection. Called with t.mu held.
func (t *stripeTable) register(id uint32, local io.ReadWriteCloser) *stripe {
	// The first channel counts from the start: a join the peer sends
	// before carry runs counts as the second.
	s := &stripe{t: t, id: id, local: local, limit: t.limit, done: make(chan struct{}), channels: 1, live: 1}
	s.turn.L = &s.mu
	t.byID[id] = s
	return s
}

// openPayload reads the extra data of nc, a plain channel or one of
// stripedType, into m (the plain channel's payload), and the striped
// connection's id before it: striped says which. False, and nc rejected,
// if it is malformed.
func openPayload(nc ssh.NewChannel, stripedType string, m any) (id uint32, striped, ok bool) {
	payload := nc.ExtraData()
	striped = nc.ChannelType() == stripedType
	if striped {
		var open stripeOpen
		if ssh.Unmarshal(payload, &open) != nil {
			nc.Reject(ssh.ConnectionFailed, "malformed "+nc.ChannelType()+" channel")
			return 0, false, false
		}
		id, payload = open.ID, open.Rest
	}
	if ssh.Unmarshal(payload, m) != nil {
		nc.Reject(ssh.ConnectionFailed, "malformed "+nc.ChannelType()+" channel")
		return 0, false, false
	}
	return id, striped, true
}

// carryFirst accepts nc, the first channel of the peer's striped
// connection id, and carries local over it until it ends. If it cannot,
// local is closed, and nc rejected saying why.
func (t *stripeTable) carryFirst(nc ssh.NewChannel, id uint32, local io.ReadWriteCloser) {
	s, err := t.accept(id, local)
	if err != nil {
		local.Close()
		nc.Reject(ssh.Prohibited, err.Error())
		return
	}
	ch, reqs, err := acceptChannel(nc)
	if err != nil {
		local.Close()
		s.drop()
		return
	}
	go ssh.DiscardRequests(reqs)
	s.carry(ch)
}

// unregister forgets s.
func (t *stripeTable) unregister(s *stripe) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[s.id] == s {
		delete(t.byID, s.id)
	}
}

// join answers the peer's stripeJoinType channel: one more channel of a
// striped connection.
func (t *stripeTable) join(nc ssh.NewChannel) {
	var m stripeOpen
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil || len(m.Rest) != 0 {
		nc.Reject(ssh.ConnectionFailed, "malformed "+stripeJoinType+" channel")
		return
	}
	err := t.joinWith(m.ID, func() (io.ReadWriteCloser, error) {
		ch, reqs, err := acceptChannel(nc)
		if err != nil {
			return nil, err
		}
		go ssh.DiscardRequests(reqs)
		return ch, nil
	})
	if err != nil {
		nc.Reject(ssh.ResourceShortage, err.Error())
	}
}

// joinWith adds the channel accept opens to striped connection id; an
// error, accept not called, if there is no such connection, it has as many
// channels as it may, or the agent's caps are reached.
func (t *stripeTable) joinWith(id uint32, accept func() (io.ReadWriteCloser, error)) error {
	t.mu.Lock()
	s := t.byID[id]
	t.mu.Unlock()
	if s == nil {
		return fmt.Errorf("no striped connection %d is open", id)
	}
	if !s.reserve() {
		return fmt.Errorf("striped connection %d has %d channels, as many as it may, or has ended", id, s.limit)
	}
	if t.take != nil {
		if err := t.take(); err != nil {
			s.unreserve(false)
			return err
		}
	}
	ch, err := accept()
	if err != nil {
		s.unreserve(true)
		return nil // the peer is gone; nothing to tell it
	}
	s.add(ch, true)
	return nil
}

// stripe is one striped connection: local, the application's end, and the
// channels that carry it.
type stripe struct {
	t     *stripeTable
	id    uint32
	local io.ReadWriteCloser
	limit int
	done  chan struct{} // closed when both directions ended, or at a failure

	// Sending. The pump that holds srcMu reads local; the offset of what
	// it reads is sent, which it advances.
	srcMu    sync.Mutex
	sent     uint64
	srcDone  bool        // local's reading half ended; under srcMu
	srcEnded atomic.Bool // the same, readable without srcMu
	pumps    atomic.Int32
	writing  atomic.Int32 // pumps in a channel's Write
	// The rate of what is sent: since when, and from which offset, it is
	// measured; under rateMu.
	rateMu     sync.Mutex
	rateSince  time.Time
	rateFrom   uint64
	rateWaited bool // a write waited since rateSince

	mu       sync.Mutex
	turn     sync.Cond // on mu: next or the state changed
	chans    []io.ReadWriteCloser
	channels int  // chans and those reserved, opening
	joined   int  // channels counted with t.take
	growing  int  // channels of this end's that are opening
	ended    bool // done is closed
	sendDone bool // the end of the sending direction is written
	// Receiving: the offset of the next byte local is to be given, the
	// readers of channels that have not ended (and reserved channels),
	// the offsets of those waiting for their turn, whether one is writing
	// to local, and whether the end of the direction came.
	next     uint64
	live     int
	waiting  []uint64
	copying  bool
	recvDone bool
}

// drop forgets a stripe whose first channel did not open.
func (s *stripe) drop() { s.t.unregister(s) }

// carry carries local over first and the channels added to it until both
// directions end or it fails, then closes local and every channel, and
// forgets the stripe.
func (s *stripe) carry(first io.ReadWriteCloser) {
	s.add(first, false)
	<-s.done
	s.mu.Lock()
	chans := s.chans
	joined := s.joined
	s.chans = nil
	s.mu.Unlock()
	s.local.Close()
	for _, ch := range chans {
		ch.Close()
	}
	s.t.unregister(s)
	for range joined {
		if s.t.give != nil {
			s.t.give()
		}
	}
}

// finish ends the stripe. Called with s.mu held.
func (s *stripe) finish() {
	if !s.ended {
		s.ended = true
		close(s.done)
		s.turn.Broadcast()
	}
}

// fail ends the stripe at a failure.
func (s *stripe) fail() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finish()
}

// reserve counts a channel that is opening, if the stripe may have one
// more.
func (s *stripe) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.channels >= s.limit {
		return false
	}
	s.channels++
	s.live++
	return true
}

// unreserve forgets a reserved channel that did not open; counted says
// t.take counted it.
func (s *stripe) unreserve(counted bool) {
	if counted && s.t.give != nil {
		s.t.give()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels--
	s.readerEnded()
}

// readerEnded counts a channel reader less. When none is left, no channel
// can carry what is still to come either way: the stripe ends. Called with
// s.mu held.
func (s *stripe) readerEnded() {
	s.live--
	if s.live == 0 {
		s.finish()
	}
	s.turn.Broadcast()
}

// add starts carrying a reserved channel; counted says it was counted with
// t.take (all but the first).
func (s *stripe) add(ch io.ReadWriteCloser, counted bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		ch.Close()
		if counted && s.t.give != nil {
			s.t.give()
		}
		s.mu.Lock()
		s.readerEnded()
		s.mu.Unlock()
		return
	}
	s.chans = append(s.chans, ch)
	if counted {
		s.joined++
	}
	pump := !s.srcEnded.Load()
	if pump {
		s.pumps.Add(1)
	}
	s.mu.Unlock()
	if pump {
		go s.pump(ch)
	}
	go s.receive(ch)
}

// grow doubles the channels (up to the stripe's limit) by opening as many
// more of this end's, unless some are opening or the stripe has as many as
// it may.
func (s *stripe) grow() {
	s.mu.Lock()
	if s.growing > 0 || s.ended || s.channels >= s.limit {
		s.mu.Unlock()
		return
	}
	k := min(s.channels, s.limit-s.channels)
	s.growing = k
	s.channels += k
	s.live += k
	s.mu.Unlock()
	for range k {
		go s.openJoin()
	}
}

// openJoin opens one channel that grow reserved and carries the stripe
// over it too; when the last of those grow opened is done, the rate is
// measured anew.
func (s *stripe) openJoin() {
	defer func() {
		s.mu.Lock()
		s.growing--
		last := s.growing == 0
		s.mu.Unlock()
		if last {
			s.measureAnew()
		}
	}()
	if s.t.take != nil {
		if s.t.take() != nil {
			s.unreserve(false)
			return
		}
	}
	ch, err := s.t.open(ssh.Marshal(stripeOpen{ID: s.id}))
	if err != nil {
		s.unreserve(true)
		return
	}
	s.add(ch, true)
}

// pump sends what local says over ch, taking turns with the other
// channels' pumps, until local's reading half ends, then writes the end of
// the direction if it saw it.
func (s *stripe) pump(ch io.ReadWriteCloser) {
	var b streamBuffer
	b.headroom = segmentHeader
	defer b.release()
	defer s.pumpDone()
	for {
		s.srcMu.Lock()
		if s.srcDone {
			s.srcMu.Unlock()
			return
		}
		n, err := s.local.Read(b.space())
		off := s.sent
		s.sent += uint64(n)
		if err != nil {
			s.srcDone = true
			s.srcEnded.Store(true)
		}
		s.srcMu.Unlock()
		if n > 0 {
			seg := b.withHeader(n)
			putSegmentHeader(seg, off, n)
			start := time.Now()
			s.writing.Add(1)
			_, werr := writeData(ch, seg)
			others := s.writing.Add(-1)
			if werr != nil {
				s.fail()
				return
			}
			waited := time.Since(start) >= stripeGrowWait && others == s.pumps.Load()-1
			if b.adapt(n) && s.windowBound(off+uint64(n), waited) {
				s.grow()
			}
		}
		if errors.Is(err, io.EOF) {
			var end [segmentHeader]byte
			putSegmentHeader(end[:], off+uint64(n), 0)
			if _, err := ch.Write(end[:]); err != nil {
				s.fail()
				return
			}
			s.mu.Lock()
			s.sendDone = true
			s.mu.Unlock()
			return
		}
		if err != nil {
			s.fail()
			return
		}
	}
}

// windowBound takes a full read, sent up to sent, whose write waited
// (waited) or not, and reports whether the channels' windows hold the
// stripe back: over the last stripeRatePeriod or round trip, whichever is
// longer, a write waited, and what was sent came at a quarter or more of
// what the channels' windows let through in the SSH connection's shortest
// round trip. It measures anew after each such period, and says false in
// between.
func (s *stripe) windowBound(sent uint64, waited bool) bool {
	rtt := time.Duration(s.t.minRTT.Load())
	s.rateMu.Lock()
	defer s.rateMu.Unlock()
	now := time.Now()
	if s.rateSince.IsZero() || sent < s.rateFrom {
		s.rateSince, s.rateFrom, s.rateWaited = now, sent, false
		return false
	}
	s.rateWaited = s.rateWaited || waited
	took := now.Sub(s.rateSince)
	if took < max(stripeRatePeriod, rtt) {
		return false
	}
	rate := float64(sent-s.rateFrom) / took.Seconds()
	bound := s.rateWaited
	s.rateSince, s.rateFrom, s.rateWaited = now, sent, false
	s.mu.Lock()
	channels := len(s.chans)
	s.mu.Unlock()
	return bound && rtt > 0 && rate*4 >= float64(channels*stripeWindow)/rtt.Seconds()
}

// measureAnew starts the rate's measurement again at the next full read:
// channels were added, and what was sent before does not tell what they
// let through.
func (s *stripe) measureAnew() {
	s.rateMu.Lock()
	defer s.rateMu.Unlock()
	s.rateSince = time.Time{}
}

// pumpDone counts a pump less; the last one after the end was written
// ends the sending direction.
func (s *stripe) pumpDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pumps.Add(-1) == 0 && s.sendDone && s.recvDone {
		s.finish()
	}
}

func putSegmentHeader(b []byte, off uint64, n int) {
	binary.BigEndian.PutUint64(b, off)
	binary.BigEndian.PutUint32(b[8:], uint32(n))
}

// receive gives local the segments ch brings, each in its turn, until ch
// ends.
func (s *stripe) receive(ch io.ReadWriteCloser) {
	r := segmentReader{ch: ch}
	defer r.b.release()
	for {
		off, n, err := r.header()
		if err != nil {
			s.mu.Lock()
			s.readerEnded()
			s.mu.Unlock()
			return
		}
		if n > maxSegment || !s.awaitTurn(off) {
			s.fail()
			return
		}
		if n == 0 {
			s.endReceived()
			continue
		}
		if err := r.copyTo(s.local, int(n)); err != nil {
			s.fail()
			return
		}
		s.mu.Lock()
		s.next += uint64(n)
		s.copying = false
		s.turn.Broadcast()
		s.mu.Unlock()
	}
}

// awaitTurn waits until the segment at off is the next one to give local,
// and takes the turn; false if the stripe ended, or the segment cannot
// come in turn: it overlaps one given already or comes after the end, or
// every channel that could bring the one before it waits for a later one.
func (s *stripe) awaitTurn(off uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = append(s.waiting, off)
	defer func() { s.waiting = slices.DeleteFunc(s.waiting, func(o uint64) bool { return o == off }) }()
	for {
		switch {
		case s.ended || s.recvDone || off < s.next:
			return false
		case off == s.next && !s.copying:
			s.copying = true
			return true
		case !s.copying && len(s.waiting) == s.live && !slices.Contains(s.waiting, s.next):
			return false
		}
		s.turn.Wait()
	}
}

// endReceived passes the end of the receiving direction on to local, as
// pipe does; the stripe ends if the sending direction has ended too.
func (s *stripe) endReceived() {
	hc, ok := s.local.(halfCloser)
	if !ok || hc.CloseWrite() != nil {
		s.fail()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recvDone = true
	s.copying = false
	if s.sendDone && s.pumps.Load() == 0 {
		s.finish()
	}
	s.turn.Broadcast()
}

// segmentReader reads the segments of one channel. Each Read of an SSH
// channel may send the peer a window adjustment (a packet of its own), so
// a header is read with as much as the buffer holds, and what came with it
// (the segment's bytes, often the next header too) waits in the buffer;
// a segment's bytes are then read up to its end only (copyTo). It holds at
// most one buffer beyond the channel's window.
type segmentReader struct {
	ch   io.Reader
	b    streamBuffer
	last int    // the length of the last segment
	have []byte // read and not yet used: a part of b's space
}

// header reads the next segment's offset and length.
func (r *segmentReader) header() (off uint64, n uint32, err error) {
	if len(r.have) == 0 {
		// Sized by the last segment, as a plain connection's buffer is by
		// its last read: a sparse stream waits with the small buffer.
		r.b.fit(r.last)
	}
	for len(r.have) < segmentHeader {
		space := r.b.space()
		kept := copy(space, r.have)
		m, err := r.ch.Read(space[kept:])
		r.have = space[:kept+m]
		if err != nil && len(r.have) < segmentHeader {
			return 0, 0, err
		}
	}
	off, n = binary.BigEndian.Uint64(r.have), binary.BigEndian.Uint32(r.have[8:])
	r.have = r.have[segmentHeader:]
	r.last = int(n)
	return off, n, nil
}

// copyTo writes the n bytes of the segment whose header was read to local.
// What of the segment the buffer has room for is read before it is written:
// its sender wrote it at once, so the rest of it follows the packet that
// brought its start, and a segment written in one write instead of a write
// per packet costs the local connection half the system calls and packets.
func (r *segmentReader) copyTo(local io.Writer, n int) error {
	for n > 0 {
		if len(r.have) == 0 {
			r.b.fit(n)
			r.have = r.b.space()[:0]
		}
		if room := r.have[len(r.have):cap(r.have)]; len(r.have) < n && len(room) > 0 {
			m, err := io.ReadFull(r.ch, room[:min(n-len(r.have), len(room))])
			r.have = r.have[:len(r.have)+m]
			if len(r.have) == 0 {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := min(n, len(r.have))
		if _, err := local.Write(r.have[:k]); err != nil {
			return err
		}
		r.have, n = r.have[k:], n-k
	}
	return nil
}
