package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// unixSocket is a socket file the daemon created and removes on Shutdown.
type unixSocket struct {
	path string
	fi   fs.FileInfo // to remove it only if it is still ours
}

// listenUnix creates a unix socket at path with mode 0600 that nobody else
// can connect to before it has that mode: it is bound inside a fresh private
// (0700) directory, chmod-ed, then renamed into place. The parent directory
// is created with mode 0700 if missing. A stale socket at path (one nobody
// answers on) is removed; anything else there is an error.
func listenUnix(path string) (net.Listener, *unixSocket, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("listen: socket dir: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp(dir, ".t")
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	defer os.RemoveAll(tmp) // empty after the rename; best effort on failure
	tmpSock := filepath.Join(tmp, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmpSock, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	// The socket file moves; we remove it ourselves on Shutdown.
	l.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, *unixSocket, error) {
		_ = l.Close() // the setup error is the one to report
		return nil, nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(tmpSock, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmpSock, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return l, &unixSocket{path: path, fi: fi}, nil
}

// removeStale removes a socket at path that nobody answers on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close() // only probing
		return fmt.Errorf("listen: %s: another daemon is listening there", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("listen: probe existing socket: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("listen: remove stale socket: %w", err)
	}
	return nil
}

// remove deletes the socket file if it is still the one we created.
func (s *unixSocket) remove() error {
	fi, err := os.Lstat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove socket: %w", err)
	}
	if !os.SameFile(fi, s.fi) {
		return nil // replaced by someone else; not ours to remove
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove socket: %w", err)
	}
	return nil
}

// serverTLS loads the TCP listener's TLS configuration; with a client CA it
// requires and verifies client certificates (mTLS).
func serverTLS(c TLSConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCA != "" {
		pem, err := os.ReadFile(c.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls.client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.client_ca: %s: no PEM certificates", c.ClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
