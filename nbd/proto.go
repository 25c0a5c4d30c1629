package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire constants from the NBD protocol (doc/proto.md in NetworkBlockDevice/nbd).
// All integers on the wire are big-endian.
const (
	magicInit     uint64 = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt      uint64 = 0x49484156454f5054 // "IHAVEOPT"
	magicOptReply uint64 = 0x0003e889045565a9
	magicRequest  uint32 = 0x25609513
	magicReply    uint32 = 0x67446698 // simple reply
)

// Handshake flags (server, 16 bits) and client flags (32 bits).
const (
	flagFixedNewstyle uint16 = 1 << 0
	flagNoZeroes      uint16 = 1 << 1

	clientFlagFixedNewstyle uint32 = 1 << 0
	clientFlagNoZeroes      uint32 = 1 << 1
	clientFlagsKnown               = clientFlagFixedNewstyle | clientFlagNoZeroes
)

// Option types.
const (
	optExportName     uint32 = 1
	optAbort          uint32 = 2
	optList           uint32 = 3
	optStartTLS       uint32 = 5
	optInfo           uint32 = 6
	optGo             uint32 = 7
	optStructuredRepl uint32 = 8
	optSetMetaContext uint32 = 10
)

// Option reply types.
const (
	repAck        uint32 = 1
	repServer     uint32 = 2
	repInfo       uint32 = 3
	repErrUnsup   uint32 = 1<<31 + 1
	repErrInvalid uint32 = 1<<31 + 3
	repErrUnknown uint32 = 1<<31 + 6
)

// Info types for NBD_REP_INFO.
const (
	infoExport    uint16 = 0
	infoBlockSize uint16 = 3
)

// Transmission flags.
const (
	tflagHasFlags        uint16 = 1 << 0
	tflagSendFlush       uint16 = 1 << 2
	tflagSendWriteZeroes uint16 = 1 << 6

	transmissionFlags = tflagHasFlags | tflagSendFlush | tflagSendWriteZeroes
)

// Command types and flags.
const (
	cmdRead        uint16 = 0
	cmdWrite       uint16 = 1
	cmdDisc        uint16 = 2
	cmdFlush       uint16 = 3
	cmdWriteZeroes uint16 = 6

	cmdFlagFUA uint16 = 1 << 0
)

// Error values carried in replies (Linux errno numbers, as the protocol fixes them).
const (
	errnoOK    uint32 = 0
	errnoIO    uint32 = 5
	errnoInval uint32 = 22
	errnoNoSpc uint32 = 28
)

// Size limits.
const (
	// MaxPayload is the largest request length, in bytes, the server accepts
	// (and advertises as the maximum block size).
	MaxPayload = 32 << 20
	// PreferredBlockSize is the advertised preferred block size in bytes.
	PreferredBlockSize = 4096
	// maxOptionLen bounds the data of one option, in bytes.
	maxOptionLen = 64 << 10
	// maxExportName bounds an export name, in bytes (the protocol's limit).
	maxExportName = 4096
)

const (
	optionHeaderLen  = 16 // magic(8) option(4) length(4)
	requestHeaderLen = 28 // magic(4) flags(2) type(2) cookie(8) offset(8) length(4)
)

var (
	// ErrProtocol is wrapped by every error caused by a peer breaking the protocol.
	ErrProtocol = errors.New("nbd: protocol violation")
)

// option is one parsed option header.
type option struct {
	Code uint32
	Len  uint32
}

// parseOptionHeader decodes a 16-byte option header.
func parseOptionHeader(b []byte) (option, error) {
	if len(b) != optionHeaderLen {
		return option{}, fmt.Errorf("%w: option header is %d bytes", ErrProtocol, len(b))
	}
	if m := binary.BigEndian.Uint64(b); m != magicOpt {
		return option{}, fmt.Errorf("%w: option magic %#x", ErrProtocol, m)
	}
	o := option{Code: binary.BigEndian.Uint32(b[8:]), Len: binary.BigEndian.Uint32(b[12:])}
	if o.Len > maxOptionLen {
		return o, fmt.Errorf("%w: option %d data of %d bytes exceeds %d", ErrProtocol, o.Code, o.Len, maxOptionLen)
	}
	return o, nil
}

// infoRequest is the data of NBD_OPT_INFO and NBD_OPT_GO.
type infoRequest struct {
	Name  string
	Infos []uint16
}

// parseInfoRequest decodes the data of NBD_OPT_INFO / NBD_OPT_GO:
// name length(4), name, number of info requests(2), info types(2 each).
func parseInfoRequest(b []byte) (infoRequest, error) {
	var r infoRequest
	if len(b) < 4 {
		return r, fmt.Errorf("%w: info request of %d bytes", ErrProtocol, len(b))
	}
	nameLen := binary.BigEndian.Uint32(b)
	b = b[4:]
	if nameLen > maxExportName || uint64(nameLen)+2 > uint64(len(b)) {
		return r, fmt.Errorf("%w: export name of %d bytes in %d", ErrProtocol, nameLen, len(b))
	}
	r.Name = string(b[:nameLen])
	b = b[nameLen:]
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) != 2*n {
		return r, fmt.Errorf("%w: %d info requests in %d bytes", ErrProtocol, n, len(b))
	}
	r.Infos = make([]uint16, n)
	for i := range r.Infos {
		r.Infos[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return r, nil
}

// request is one parsed transmission-phase request header.
type request struct {
	Flags  uint16
	Type   uint16
	Cookie uint64
	Offset uint64
	Length uint32
}

// parseRequestHeader decodes a 28-byte request header.
func parseRequestHeader(b []byte) (request, error) {
	if len(b) != requestHeaderLen {
		return request{}, fmt.Errorf("%w: request header is %d bytes", ErrProtocol, len(b))
	}
	if m := binary.BigEndian.Uint32(b); m != magicRequest {
		return request{}, fmt.Errorf("%w: request magic %#x", ErrProtocol, m)
	}
	return request{
		Flags:  binary.BigEndian.Uint16(b[4:]),
		Type:   binary.BigEndian.Uint16(b[6:]),
		Cookie: binary.BigEndian.Uint64(b[8:]),
		Offset: binary.BigEndian.Uint64(b[16:]),
		Length: binary.BigEndian.Uint32(b[24:]),
	}, nil
}

// action says how the server handles a request, decided from its header alone.
type action int

const (
	actServe      action = iota // carry the command out
	actReject                   // reply with the errno; a WRITE's payload is consumed first
	actDisconnect               // NBD_CMD_DISC: close without a reply
	actAbort                    // the stream cannot be trusted: close with an error
)

// check decides how to handle r against an export of size bytes. For
// actReject it returns the errno to reply with.
func (r request) check(size int64) (action, uint32) {
	inRange := func() bool {
		return r.Offset <= uint64(size) && uint64(r.Length) <= uint64(size)-r.Offset
	}
	switch r.Type {
	case cmdDisc:
		return actDisconnect, errnoOK
	case cmdFlush:
		return actServe, errnoOK
	case cmdWrite:
		if r.Length > MaxPayload {
			// The payload cannot be skipped safely: give up on the connection.
			return actAbort, errnoInval
		}
		if r.Length == 0 {
			return actReject, errnoInval
		}
		if !inRange() {
			return actReject, errnoNoSpc
		}
		return actServe, errnoOK
	case cmdRead:
		if r.Length == 0 || r.Length > MaxPayload {
			return actReject, errnoInval
		}
		if !inRange() {
			return actReject, errnoInval
		}
		return actServe, errnoOK
	case cmdWriteZeroes:
		if r.Length == 0 || r.Length > MaxPayload {
			return actReject, errnoInval
		}
		if !inRange() {
			return actReject, errnoNoSpc
		}
		return actServe, errnoOK
	default:
		return actReject, errnoInval
	}
}

// appendOptionReply appends an option reply header and its data.
func appendOptionReply(b []byte, opt, typ uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, magicOptReply)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// appendSimpleReply appends a simple reply header (the payload of a
// successful read follows it).
func appendSimpleReply(b []byte, errno uint32, cookie uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, magicReply)
	b = binary.BigEndian.AppendUint32(b, errno)
	return binary.BigEndian.AppendUint64(b, cookie)
}
