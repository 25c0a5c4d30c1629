// Package nbd is a Network Block Device server: it exports one Backend (for
// example an overlay.Device) over the NBD protocol, as spoken by QEMU's
// built-in NBD client (-blockdev driver=nbd,server.type=unix,...).
//
// # Protocol subset
//
// Fixed newstyle handshake only (the client must set NBD_FLAG_C_FIXED_NEWSTYLE;
// NBD_FLAG_C_NO_ZEROES is honoured). Options: NBD_OPT_EXPORT_NAME, NBD_OPT_GO
// and NBD_OPT_INFO (replying NBD_INFO_EXPORT and NBD_INFO_BLOCK_SIZE with
// minimum 1, preferred 4096 and maximum MaxPayload bytes), NBD_OPT_LIST and
// NBD_OPT_ABORT; every other option (STARTTLS, STRUCTURED_REPLY, meta
// contexts, ...) gets NBD_REP_ERR_UNSUP. The export is found by its name or
// by the empty (default) name.
//
// Transmission uses simple replies only. Commands: READ, WRITE, FLUSH,
// WRITE_ZEROES and DISC; the advertised flags are HAS_FLAGS, SEND_FLUSH and
// SEND_WRITE_ZEROES. NBD_CMD_FLAG_FUA is accepted and means a flush after the
// write. An unknown command gets EINVAL and the connection goes on.
//
// # Bounds
//
// Every length is checked before anything is allocated or the backend is
// touched: lengths of zero or above MaxPayload get EINVAL, ranges beyond the
// export get EINVAL (READ) or ENOSPC (WRITE, WRITE_ZEROES), and a rejected
// WRITE's payload is read and discarded. A WRITE above MaxPayload cannot be
// skipped safely, so the connection is closed with an error, as it is for a
// bad magic or a malformed option. The backend only ever sees ranges inside
// [0, Size()). Option data is capped at 64 KiB.
//
// # Concurrency and ownership
//
// Each connection is served by one goroutine, one request at a time and in
// order, so a Backend used by a single connection sees no concurrent calls;
// with several connections it must be safe for concurrent use. ServeConn owns
// and closes its net.Conn. Serve owns the listener from the moment it is
// called: it closes it, and every connection it accepted, when ctx is done or
// accept fails, and waits for all handlers before it returns, so no goroutine
// outlives it.
//
// # Counters
//
// Server.Counts reports what a server has served over all its connections:
// requests and bytes per command (read, write, write zeroes, flush), the
// requests refused before the backend, and the time spent serving them.
// They are atomics a request adds to; reading them takes no lock and does
// not slow a connection down.
//
// Parsing (option headers, NBD_OPT_INFO/GO data, request headers and the
// accept/reject decision for a request) is pure functions over bytes,
// fuzzed on their own and through a live connection.
//
// nbd imports no other package of this module; logging goes to the injected
// zap logger.
package nbd
