package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// endpoint is one of the daemon's HTTP servers: /metrics, the dashboard.
type endpoint struct {
	name string
	srv  *http.Server
	addr string
	done chan struct{} // closed when it stops serving
}

// listenHTTP listens on addr for the endpoint configured under key (nil
// when addr is empty: the endpoint is off) and adds its close to cleanup.
func listenHTTP(key, addr string, cleanup *[]func()) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	*cleanup = append(*cleanup, func() { _ = lis.Close() })
	return lis, nil
}

// startEndpoint serves h at pattern on lis in its own goroutine. With mtc
// it is HTTPS and asks for auth's token when set; without, it is plain
// HTTP (a loopback address only: Config.validateHTTP) and refuses a token.
func startEndpoint(name string, lis net.Listener, mtc *tls.Config, auth *tokenAuth, h http.Handler, pattern string, log *zap.Logger) *endpoint {
	switch {
	case mtc == nil:
		h = noToken(h)
	case auth != nil:
		h = auth.http(h)
	}
	mux := http.NewServeMux()
	mux.Handle(pattern, h)
	e := &endpoint{name: name, addr: lis.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, TLSConfig: mtc}}
	go func() {
		defer close(e.done)
		serve := e.srv.Serve
		if mtc != nil {
			serve = func(l net.Listener) error { return e.srv.ServeTLS(l, "", "") }
		}
		if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" server stopped", zap.Error(err))
		}
	}()
	return e
}

// address is the endpoint's host:port ("" for none).
func (e *endpoint) address() string {
	if e == nil {
		return ""
	}
	return e.addr
}

// shutdown stops the endpoint: open requests get until ctx ends, then
// are cut off. A nil endpoint (off) has nothing to stop.
func (e *endpoint) shutdown(ctx context.Context) error {
	if e == nil {
		return nil
	}
	var err error
	if serr := e.srv.Shutdown(ctx); serr != nil {
		if cerr := e.srv.Close(); cerr != nil {
			err = fmt.Errorf("%s server: %w", e.name, cerr)
		}
	}
	<-e.done
	return err
}
