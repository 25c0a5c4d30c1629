package server

import (
	"net"
	"sync"

	"go.uber.org/zap"
)

// peerLimitListener caps the connections it hands out: at most max at once
// (Accept waits for one to close, as netutil.LimitListener does), and at
// most perPeer from one TCP peer (peerKey), counted from accept, so before
// the TLS handshake and the token check. A connection past perPeer is
// closed at once and Accept goes on; with perPeer < max no one peer can
// take every slot. Non-TCP peers (a unix socket) count only against max.
type peerLimitListener struct {
	net.Listener
	sem     chan struct{}
	perPeer int
	refused func() // counts a connection closed for its peer's cap
	log     *zap.Logger

	mu    sync.Mutex
	peers map[string]int // open connections by peerKey

	done      chan struct{}
	closeOnce sync.Once
}

func newPeerLimitListener(l net.Listener, max, perPeer int, refused func(), log *zap.Logger) *peerLimitListener {
	return &peerLimitListener{Listener: l, sem: make(chan struct{}, max), perPeer: perPeer,
		refused: refused, log: log, peers: map[string]int{}, done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *peerLimitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		key, ok := peerKey(c.RemoteAddr())
		if ok && !l.admit(key) {
			<-l.sem
			l.refused()
			if ce := l.log.Check(zap.DebugLevel, "connection refused: peer at its cap"); ce != nil {
				ce.Write(zap.String("peer", key), zap.Int("cap", l.perPeer))
			}
			if err := c.Close(); err != nil {
				l.log.Debug("close refused connection", zap.Error(err))
			}
			continue
		}
		pc := &peerConn{Conn: c}
		pc.release = func() {
			if ok {
				l.leave(key)
			}
			<-l.sem
		}
		return pc, nil
	}
}

// Close implements net.Listener; it also ends an Accept waiting for a slot.
func (l *peerLimitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// admit counts a connection from key, unless key is at its cap.
func (l *peerLimitListener) admit(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.peers[key] >= l.perPeer {
		return false
	}
	l.peers[key]++
	return true
}

func (l *peerLimitListener) leave(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.peers[key]--; l.peers[key] <= 0 {
		delete(l.peers, key)
	}
}

// peerKey is what the per-peer cap counts by: the IPv4 address, or the
// /64 of an IPv6 address (one host usually holds a whole /64). ok is
// false for a non-TCP peer.
func peerKey(a net.Addr) (key string, ok bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return "", false
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String(), true
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64", true
}

// peerConn releases its slots once, on its first Close.
type peerConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close implements net.Conn.
func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
