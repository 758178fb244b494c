package wire

import (
	"encoding/binary"
	"errors"
)

// HeaderSize is the size of the SMB2 header every message starts with.
const HeaderSize = 64

// ProtocolID starts every SMB2 message; TransformID an encrypted one,
// and SMB1ID an SMB1 message (only its NEGOTIATE is understood, to move
// old clients on to SMB2).
var (
	ProtocolID  = [4]byte{0xFE, 'S', 'M', 'B'}
	TransformID = [4]byte{0xFD, 'S', 'M', 'B'}
	SMB1ID      = [4]byte{0xFF, 'S', 'M', 'B'}
)

// Commands.
const (
	Negotiate      uint16 = 0x00
	SessionSetup   uint16 = 0x01
	Logoff         uint16 = 0x02
	TreeConnect    uint16 = 0x03
	TreeDisconnect uint16 = 0x04
	Create         uint16 = 0x05
	Close          uint16 = 0x06
	Flush          uint16 = 0x07
	Read           uint16 = 0x08
	Write          uint16 = 0x09
	Lock           uint16 = 0x0A
	Ioctl          uint16 = 0x0B
	Cancel         uint16 = 0x0C
	Echo           uint16 = 0x0D
	QueryDirectory uint16 = 0x0E
	ChangeNotify   uint16 = 0x0F
	QueryInfo      uint16 = 0x10
	SetInfo        uint16 = 0x11
	OplockBreak    uint16 = 0x12
)

// Header flags.
const (
	FlagResponse uint32 = 0x00000001
	FlagAsync    uint32 = 0x00000002
	FlagRelated  uint32 = 0x00000004
	FlagSigned   uint32 = 0x00000008
	FlagPriority uint32 = 0x00000070
	FlagDFS      uint32 = 0x10000000
	FlagReplay   uint32 = 0x20000000
)

// Dialects.
const (
	Dialect202 uint16 = 0x0202
	Dialect210 uint16 = 0x0210
	Dialect300 uint16 = 0x0300
	Dialect302 uint16 = 0x0302
	Dialect311 uint16 = 0x0311
)

// DialectWildcard, in the answer to an SMB1 NEGOTIATE, names no dialect:
// it tells the client the server speaks SMB 2.1 or later, and to send an
// SMB2 NEGOTIATE next.
const DialectWildcard uint16 = 0x02FF

// Header is the SMB2 header. A message is async when Flags has FlagAsync;
// then AsyncID is meaningful and TreeID is not.
type Header struct {
	CreditCharge uint16
	Status       uint32 // in requests of 3.x: ChannelSequence and Reserved
	Command      uint16
	Credits      uint16 // requested in requests, granted in responses
	Flags        uint32
	NextCommand  uint32
	MessageID    uint64
	AsyncID      uint64
	TreeID       uint32
	SessionID    uint64
	Signature    [16]byte
}

// ErrShort is returned for a message too short for what it claims to hold.
var ErrShort = errors.New("message too short")

// ErrProtocol is returned for a message that does not start with an SMB2
// header.
var ErrProtocol = errors.New("not an SMB2 message")

// ParseHeader decodes the header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, ErrShort
	}
	if [4]byte(b[0:4]) != ProtocolID || binary.LittleEndian.Uint16(b[4:]) != HeaderSize {
		return h, ErrProtocol
	}
	le := binary.LittleEndian
	h.CreditCharge = le.Uint16(b[6:])
	h.Status = le.Uint32(b[8:])
	h.Command = le.Uint16(b[12:])
	h.Credits = le.Uint16(b[14:])
	h.Flags = le.Uint32(b[16:])
	h.NextCommand = le.Uint32(b[20:])
	h.MessageID = le.Uint64(b[24:])
	if h.Flags&FlagAsync != 0 {
		h.AsyncID = le.Uint64(b[32:])
	} else {
		h.TreeID = le.Uint32(b[36:])
	}
	h.SessionID = le.Uint64(b[40:])
	copy(h.Signature[:], b[48:64])
	return h, nil
}

// Put encodes h into the first HeaderSize bytes of b.
func (h *Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	le := binary.LittleEndian
	copy(b[0:4], ProtocolID[:])
	le.PutUint16(b[4:], HeaderSize)
	le.PutUint16(b[6:], h.CreditCharge)
	le.PutUint32(b[8:], h.Status)
	le.PutUint16(b[12:], h.Command)
	le.PutUint16(b[14:], h.Credits)
	le.PutUint32(b[16:], h.Flags)
	le.PutUint32(b[20:], h.NextCommand)
	le.PutUint64(b[24:], h.MessageID)
	if h.Flags&FlagAsync != 0 {
		le.PutUint64(b[32:], h.AsyncID)
	} else {
		le.PutUint32(b[32:], 0)
		le.PutUint32(b[36:], h.TreeID)
	}
	le.PutUint64(b[40:], h.SessionID)
	copy(b[48:64], h.Signature[:])
}

// Offsets of header fields that are rewritten in place.
const (
	OffFlags       = 16
	OffNextCommand = 20
	OffSignature   = 48
)

// Field returns length bytes of msg at off, an offset from the start of
// the header, after checking that they lie in msg past the header and the
// fixed part of the body (min). A zero length gives an empty slice whatever
// the offset.
func Field(msg []byte, off, length uint32, min int) ([]byte, error) {
	if length == 0 {
		return nil, nil
	}
	end := uint64(off) + uint64(length)
	if uint64(off) < uint64(min) || end > uint64(len(msg)) {
		return nil, ErrShort
	}
	return msg[off:end], nil
}

// Align8 is n rounded up to a multiple of 8.
func Align8(n int) int { return (n + 7) &^ 7 }
